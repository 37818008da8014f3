"""A Lightning job for the split-test tests: as many devices as torchrun started processes,
its batch from GPULOTS_PER_RANK_BATCH, its steps from GPULOTS_MAX_STEPS; no callback (the
tool marks the optimizer's steps by itself)."""

import os

import pytorch_lightning as pl
import torch


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1)
        )

    def training_step(self, batch: torch.Tensor, index: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


data = torch.utils.data.TensorDataset(torch.randn(8192, 128), torch.randn(8192, 1))
loader = torch.utils.data.DataLoader(data, batch_size=int(os.environ["GPULOTS_PER_RANK_BATCH"]))
trainer = pl.Trainer(
    accelerator="gpu" if torch.cuda.is_available() else "cpu",
    devices=int(os.environ["WORLD_SIZE"]),
    strategy="ddp",
    max_steps=int(os.environ["GPULOTS_MAX_STEPS"]),
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(Regression(), loader)
