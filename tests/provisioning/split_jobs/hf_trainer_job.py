"""A Hugging Face Trainer job with a tiny GPT-2 built from its config (nothing downloaded),
for the split-test tests: its batch per device from GPULOTS_PER_RANK_BATCH, its steps from
GPULOTS_MAX_STEPS, its steps marked by the tool's Trainer callback."""

import os
import tempfile

import gpulots  # type: ignore[import-not-found]  # on PYTHONPATH under the tool
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4096

    def __getitem__(self, index: int) -> dict:
        ids = torch.randint(0, 128, (32,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids}


model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=2))
arguments = TrainingArguments(
    output_dir=tempfile.mkdtemp(),
    per_device_train_batch_size=int(os.environ["GPULOTS_PER_RANK_BATCH"]),
    max_steps=int(os.environ["GPULOTS_MAX_STEPS"]),
    use_cpu=not torch.cuda.is_available(),
    ddp_backend=None if torch.cuda.is_available() else "gloo",
    report_to=[],
    save_strategy="no",
    logging_strategy="no",
    dataloader_num_workers=0,
    disable_tqdm=True,
)
Trainer(
    model=model, args=arguments, train_dataset=Tokens(), callbacks=[gpulots.hf_callback()]
).train()
