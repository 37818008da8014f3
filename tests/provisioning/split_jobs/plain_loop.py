"""A plain PyTorch DDP training loop, as a researcher writes one, for the split-test tests.

It reads its batch per process from GPULOTS_PER_RANK_BATCH and stops after GPULOTS_MAX_STEPS,
as the tool documents. Knobs for the tests (never set by the tool):
SPLIT_JOB_MARK=step (mark steps with ``with gpulots.step()``), SPLIT_JOB_SLOW_RANK=1 (that
rank computes 80 ms longer every step), SPLIT_JOB_OOM_ON_ONE_CARD=1 (alone on one card, the
job runs out of memory: on a CPU the allocator's error is raised as a CUDA one would be),
SPLIT_JOB_HANG_RANK=1 (that rank stops answering at its third step), SPLIT_JOB_NESTED_STEP=1
(its optimizer's step() calls its parent's), SPLIT_JOB_TRACE=path (each rank writes there
how many iterations it has made).
"""

import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device(
    f"cuda:{int(os.environ['LOCAL_RANK'])}" if torch.cuda.is_available() else "cpu"
)
batch = int(os.environ["GPULOTS_PER_RANK_BATCH"])
slow = os.environ.get("SPLIT_JOB_SLOW_RANK")
hang = os.environ.get("SPLIT_JOB_HANG_RANK")
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)
).to(device)
if world == 1 and os.environ.get("SPLIT_JOB_OOM_ON_ONE_CARD"):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
ddp = torch.nn.parallel.DistributedDataParallel(model)
if os.environ.get("SPLIT_JOB_NESTED_STEP"):  # a step() that calls its parent's step()

    class Clipped(torch.optim.AdamW):
        def step(self, closure=None):
            torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
            return super().step(closure)

    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])  # a plain one exists too
    optimizer: torch.optim.Optimizer = Clipped(ddp.parameters(), lr=1e-3)
else:
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
trace = os.environ.get("SPLIT_JOB_TRACE")


def one_step(index: int) -> None:
    x = torch.randn(batch, 256, device=device)
    if slow is not None and rank == int(slow):  # 80 ms more of matrix products a step
        busy = torch.randn(128, 128, device=device)
        until = time.perf_counter() + 0.08
        while time.perf_counter() < until:
            busy = torch.tanh(busy @ busy)
    if hang is not None and rank == int(hang) and index == 2:
        time.sleep(3600)
    ddp(x).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    if trace:  # replaced whole: a rank stopped mid-write never leaves an empty count
        with open(f"{trace}.{world}.{rank}.tmp", "w") as out:
            out.write(str(index + 1))
        os.replace(f"{trace}.{world}.{rank}.tmp", f"{trace}.{world}.{rank}")


if os.environ.get("SPLIT_JOB_MARK") == "step":
    import gpulots  # type: ignore[import-not-found]  # on PYTHONPATH under the tool

    for index in range(int(os.environ["GPULOTS_MAX_STEPS"])):
        with gpulots.step():
            one_step(index)
else:
    for index in range(int(os.environ["GPULOTS_MAX_STEPS"])):
        one_step(index)
dist.destroy_process_group()
