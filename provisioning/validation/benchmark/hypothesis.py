"""The sections of the researcher's hypothesis test: the model shaped from the order, the
split on one card then two (and the largest model each fits, for make_possible), the two
independent experiments, the researcher's smoke command, and the verdict."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import torch

from .frame import Frame
from .model import block_params, largest_fitting, memory_needed, shape_for
from .ranks import run_ranks
from .report import GIB, SectionFailed, SectionTimeout, not_measured
from .split import independent_runs, split_worker
from .verdict import verdict

IMBALANCE_RATIO = 0.5
"""Peak memory of the emptier card below half the fuller one's: an unbalanced split."""
COMPUTE_IMBALANCE = 1.15
"""One rank's compute time over 1.15x the other's: an unbalanced split."""


class HypothesisTest(Frame):
    def model_config(self) -> dict[str, Any]:
        args = self.args
        precision = args.precision
        measured = precision
        precision_why = ""
        if precision in ("fp8", "int8"):
            measured = "bf16"
            precision_why = (
                f"{precision} training needs a library this program does not carry "
                "(Transformer Engine, torchao); bf16 is the nearest precision PyTorch runs natively"
            )
        if not self.gpu and measured != "fp32":
            precision_why = (
                precision_why + "; " if precision_why else ""
            ) + "the CPU stand-in computes in fp32"
            measured = "fp32"
        params = (args.params_billion or 0.125) * 1e9
        layers, hidden, heads = shape_for(params)
        config: dict[str, Any] = {
            "workload": args.workload,
            "precision": precision,
            "measured_precision": measured,
            "precision_why": precision_why,
            "seq_len": args.seq_len,
            "micro_batch": args.micro_batch,
            "quick": args.quick,
        }
        ordered = {
            "layers": layers,
            "hidden": hidden,
            "heads": heads,
            "params": layers * block_params(hidden) + 2 * hidden,
        }
        why = ""
        if not self.gpu:
            small_hidden, small_layers = (64, 2) if args.quick else (128, 2)
            small_seq = min(args.seq_len, 32 if args.quick else 64)
            layers, hidden, heads = min(layers, small_layers), small_hidden, 4
            why = (
                f"CPU stand-in: the order's {ordered['params'] / 1e9:.2f}B-parameter model "
                f"({ordered['layers']} blocks of width {ordered['hidden']}, "
                f"sequence {args.seq_len}) "
                f"cannot run on this machine's CPU; measured {layers} blocks of width {hidden}, "
                f"sequence {small_seq}."
            )
            config["seq_len"] = small_seq
            config["micro_batch"] = min(args.micro_batch, 2)
        else:
            memory = torch.cuda.get_device_properties(0).total_memory
            world = max(1, len(args.cards))
            fit_two = largest_fitting(hidden, config, memory, world, sharded=True)
            if layers > fit_two:
                why = (
                    f"the order's {ordered['params'] / 1e9:.1f}B-parameter model needs about "
                    f"{memory_needed(layers, hidden, config, world, True) / GIB:.0f} GiB per card "
                    "even sharded over "
                    f"{world}; measured the largest that fits: {max(1, fit_two)} blocks"
                )
                layers = max(1, fit_two)
            peak = float(self.thresholds.get("bf16_tflops") or 300) * 1e12 * 0.4
            tokens = 2 * config["micro_batch"] * config["seq_len"]
            step = 6 * layers * block_params(hidden) * tokens / peak
            steps = 8 if args.quick else 20
            if step * steps * 3 > self.budget("split_two_cards") * 0.5:
                fewer = max(
                    1, int(layers * self.budget("split_two_cards") * 0.5 / (step * steps * 3))
                )
                if fewer < layers:
                    why = (why + "; " if why else "") + (
                        f"{layers} blocks would take about {step:.1f} s a step, over the "
                        f"time budget; measured {fewer} blocks"
                    )
                    layers = fewer
        config.update(
            layers=layers,
            hidden=hidden,
            heads=heads,
            warmup=(2 if args.quick else 3) if self.gpu else 1,
            steps=(5 if args.quick else 10) if self.gpu else 3,
        )
        self.config = config
        params_used = layers * block_params(hidden) + 2 * hidden
        self.data["model"] = {
            "params": params_used,
            "layers": layers,
            "hidden": hidden,
            "heads": heads,
            "seq_len": config["seq_len"],
            "micro_batch": config["micro_batch"],
            "precision": precision,
            "measured_precision": measured,
            "precision_why": precision_why,
            "workload": args.workload,
            "ordered": ordered,
            "scaled_down": bool(why),
            "why": why,
            "kind": "transformer blocks (causal attention + 4x MLP), built on the meta device, "
            "materialised per rank",
        }
        return config

    def split(self) -> dict[str, Any]:
        config = self.model_config()
        self.report.save()
        hypothesis = self.args.hypothesis
        world = len(self.args.cards)
        split: dict[str, Any] = {}
        self.data["split"] = split
        # One card: the same global batch as two (two micro-batches accumulated) for
        # shorter_step; one micro-batch (the per-card batch) for bigger_batch.
        one_accumulation = 2 if hypothesis == "shorter_step" else 1
        try:
            (single,) = run_ranks(
                "split_one_card",
                1,
                split_worker,
                {**config, "mode": "single", "accumulation": one_accumulation, "group": False},
                self.budget("split_one_card"),
            )
        except SectionFailed as exc:
            single = {"fits": False, "error": str(exc)[:300]}
            split["one_card_traceback"] = exc.trace
        single["accumulation"] = one_accumulation
        single["global_batch"] = config["micro_batch"] * one_accumulation
        split["one_card"] = single
        self.report.save()
        if world < 2:
            split["two_cards"] = {"mode": "skipped: only one card in the lot"}
            return split
        sharded = not single.get("fits") or self.args.force_sharded
        mode = "fsdp" if sharded else "ddp"
        pair_list = run_ranks(
            "split_two_cards",
            world,
            split_worker,
            {**config, "mode": mode, "accumulation": 1},
            self.budget("split_two_cards"),
        )
        fits = all(r.get("fits") for r in pair_list)
        pair: dict[str, Any] = {
            "mode": "sharded" if sharded else "data_parallel",
            "fits": fits,
            "global_batch": config["micro_batch"] * world,
            "per_rank": pair_list,
        }
        if fits:
            steps = [r["median_step_ms"] for r in pair_list]
            computes = [r["compute_ms"] for r in pair_list]
            peaks = [r["peak_memory_gib"] for r in pair_list]
            pair.update(
                median_step_ms=max(steps),
                samples_per_s=round(config["micro_batch"] * world / (max(steps) / 1000), 3),
                peak_memory_gib=peaks,
                memory_source=pair_list[0]["memory_source"],
                compute_ms=computes,
                compute_imbalance=round(max(computes) / min(computes), 3)
                if min(computes) > 0
                else None,
            )
            memory_imbalanced = (
                min(peaks) < IMBALANCE_RATIO * max(peaks) if not self.stand_in else False
            )
            pair["imbalanced"] = bool(
                memory_imbalanced or (pair["compute_imbalance"] or 1) > COMPUTE_IMBALANCE
            )
            if not sharded:
                quiet = max(r["no_sync_step_ms"] for r in pair_list)
                exposed = max(0.0, (max(steps) - quiet) / 1000)
                pair.update(
                    no_sync_step_ms=quiet,
                    exposed_exchange_seconds=round(exposed, 6),
                    exchange_share=round(exposed / (max(steps) / 1000), 4),
                )
            else:
                why = not_measured(
                    "FSDP2 overlaps its all-gathers and reduce-scatters with the compute; "
                    "there is no step without them to subtract"
                )
                pair.update(exposed_exchange_seconds=why, exchange_share=why)
        else:
            pair["error"] = next((r.get("error") for r in pair_list if r.get("error")), "")
        split["two_cards"] = pair
        for key in ("exposed_exchange_seconds", "exchange_share"):
            split[key] = pair.get(key, not_measured("the two-card run did not finish"))
        if hypothesis == "make_possible":
            split["make_possible"] = self.make_possible(config)
        split.update(
            precision=config["precision"],
            measured_precision=config["measured_precision"],
            steps=config["steps"],
            warmup_steps=config["warmup"],
        )
        return split

    def make_possible(self, config: dict[str, Any]) -> dict[str, Any]:
        """The largest model of this width that fits one card, then two sharded: estimated
        from the memory model, and on GPUs checked by running it."""
        hidden = config["hidden"]
        world = len(self.args.cards)
        if self.gpu:
            memory = float(torch.cuda.get_device_properties(0).total_memory)
            how = (
                "estimated from fp32 weights, gradients, AdamW and activations; checked by running"
            )
        elif self.thresholds.get("memory_gib"):
            memory = float(self.thresholds["memory_gib"]) * GIB
            how = (
                f"estimated against {self.thresholds['memory_gib']} GiB per card "
                "(CPU stand-in: not run)"
            )
        else:
            return {"how": not_measured("CPU stand-in and no card memory given")}
        ordered = self.data["model"]["ordered"]
        real = {**config, "seq_len": self.args.seq_len, "micro_batch": self.args.micro_batch}
        hidden = ordered["hidden"] if not self.gpu else hidden
        one = largest_fitting(hidden, real, memory, 1, sharded=False)
        two = largest_fitting(hidden, real, memory, world, sharded=True)
        result: dict[str, Any] = {
            "hidden": hidden,
            "one_card_max_layers": one,
            "one_card_max_params": one * block_params(hidden),
            "two_cards_max_layers": two,
            "two_cards_max_params": two * block_params(hidden),
            "how": how,
        }
        if self.gpu and one > 0 and time.monotonic() < self.deadline - 60:
            for label, world_n, layers, mode in (
                ("one_card_run", 1, one, "single"),
                ("two_cards_run", world, two, "fsdp"),
            ):
                try:
                    (first, *_rest) = run_ranks(
                        f"make_possible_{label}",
                        world_n,
                        split_worker,
                        {
                            **config,
                            "layers": layers,
                            "mode": mode,
                            "accumulation": 1,
                            "warmup": 1,
                            "steps": 2,
                            "group": world_n > 1,
                        },
                        min(self.budget("split_two_cards"), 120),
                    )
                    result[label] = {
                        "layers": layers,
                        "fits": first.get("fits"),
                        "peak_memory_gib": first.get("peak_memory_gib"),
                        "error": first.get("error", ""),
                    }
                except (SectionFailed, SectionTimeout) as exc:
                    result[label] = {"layers": layers, "fits": False, "error": str(exc)[:300]}
        return result

    def independent(self) -> list[dict[str, Any]]:
        config = self.config or self.model_config()
        runs = independent_runs(
            {**config, "accumulation": 1}, self.args.cards, self.budget("independent")
        )
        self.data.setdefault("split", {})["independent"] = runs
        return runs

    def smoke(self) -> dict[str, Any] | None:
        command = self.args.smoke
        essentials = self.data.setdefault("essentials", {})
        if not command:
            essentials["smoke"] = None
            return None
        started = time.perf_counter()
        budget = max(1.0, min(600.0, self.deadline - time.monotonic() - 10))
        try:
            done = subprocess.run(  # noqa: S602 (the researcher's own command, on their lot)
                command, shell=True, capture_output=True, text=True, timeout=budget
            )
            code, output = done.returncode, (done.stdout + done.stderr)[-2000:]
        except subprocess.TimeoutExpired:
            code, output = None, f"timed out after {budget:.0f} s"
        essentials["smoke"] = {
            "command": command,
            "returncode": code,
            "seconds": round(time.perf_counter() - started, 2),
            "output_tail": output,
        }
        return essentials["smoke"]

    def make_verdict(self) -> dict[str, Any]:
        split = self.data.get("split", {})
        model = self.data.get("model", {})
        if "two_cards" not in split:
            record = self.data["sections"].get("split", {})
            split = {
                **split,
                "two_cards": {
                    "mode": f"not run ({record.get('status')}: {record.get('error', '')[:200]})"
                },
            }
        found = verdict(self.args.hypothesis, split, model, self.stand_in)
        self.data["verdict"] = found
        return found
