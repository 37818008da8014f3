"""A job that starts its own processes with torch.multiprocessing.spawn (no torchrun, no
RANK in their environment), for ``gpulots split-test --launcher none``: as many processes
as GPULOTS_NPROC, its batch from GPULOTS_PER_RANK_BATCH, its steps from GPULOTS_MAX_STEPS."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def work(rank: int, world: int, port: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(128, 128))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = int(os.environ["GPULOTS_PER_RANK_BATCH"])
    for _ in range(int(os.environ["GPULOTS_MAX_STEPS"])):
        model(torch.randn(batch, 128)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = str(probe.getsockname()[1])
    world = int(os.environ["GPULOTS_NPROC"])
    mp.spawn(work, args=(world, free), nprocs=world)
