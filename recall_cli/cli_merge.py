"""`recall merge`: thin like cli.py. Parse, call recall_cli.merge, print the weight table (and with
--evaluate the individual-vs-merged scores), and let run_guarded turn known errors into one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from .cli_common import EXIT_USAGE, JsonOpt, fail, run_guarded

MERGE_EXIT_CODES = (
    "Exit codes: 0 ok; 1 unexpected failure; 2 bad usage: fewer than two models, a missing folder, models of "
    "different architectures, shapes or vocabularies, a missing or empty samples file, a temperature <= 0, "
    "an --out that exists (nothing is written). RECALL_DEBUG=1 shows tracebacks."
)


def register(app: typer.Typer) -> None:
    app.command(epilog=MERGE_EXIT_CODES)(merge)


def merge(
    models: Annotated[list[str], typer.Argument(help="Run directories (their best/) or save_pretrained folders, oldest first; pkg:MODULE for a packaged model.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", help="New folder: one model per input under it, plus merge.json.", show_default=False)],
    method: Annotated[str, typer.Option(help="recall, linear, task_arithmetic or ties.")] = "recall",
    reference: Annotated[Optional[str], typer.Option(help="RECALL: the newest model, whose task gives the samples (default: the last MODEL).", show_default=False)] = None,
    samples: Annotated[Optional[Path], typer.Option(help="RECALL: inputs, one per line (tab between a pair's texts).", show_default=False)] = None,
    task: Annotated[Optional[str], typer.Option(help="RECALL: take the samples from this task's training inputs (default: the reference run's task).", show_default=False)] = None,
    clusters: Annotated[Optional[int], typer.Option(min=1, help="RECALL: number of typical samples (k-means clusters).", show_default=False)] = None,
    pool: Annotated[Optional[int], typer.Option(min=1, help="RECALL: inputs drawn before clustering.", show_default=False)] = None,
    temperature: Annotated[Optional[float], typer.Option(help="RECALL: softmax temperature tau (> 0).", show_default=False)] = None,
    gamma: Annotated[Optional[str], typer.Option(help="RECALL: RBF gamma per layer: median (heuristic), hidden (1/hidden size) or a number.", show_default=False)] = None,
    base: Annotated[Optional[str], typer.Option(help="task_arithmetic/ties: theta*, the pretrained model (default: the runs' anchor.safetensors).", show_default=False)] = None,
    weights: Annotated[Optional[str], typer.Option(help="linear: one weight per model, comma-separated (default: equal).", show_default=False)] = None,
    lam: Annotated[Optional[float], typer.Option("--lambda", help="task_arithmetic (default 0.5) / ties (default 1): scale of the merged task vector.", show_default=False)] = None,
    density: Annotated[float, typer.Option(help="ties: fraction of each task vector kept.")] = 0.2,
    seed: Annotated[int, typer.Option(help="RECALL: seed of the sample pool and k-means.")] = 0,
    device: Annotated[str, typer.Option(help="RECALL representations and --evaluate: auto, cpu or cuda.")] = "auto",
    evaluate: Annotated[bool, typer.Option("--evaluate", help="Score every output and its source model on the source's task.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Merge models fine-tuned from one pretrained model into one encoder; every model keeps its head.

    RECALL (the default) weighs each layer by how close the models' representations are to the
    reference's on a few typical inputs; linear, task_arithmetic and ties are the usual baselines.
    """

    def go() -> None:
        from . import merge as m
        from .runtime import resolve_device

        if temperature is not None and temperature <= 0:
            fail(f"--temperature {temperature:g}: the softmax temperature must be > 0 (e.g. {m.DEFAULT_TEMPERATURE:g})", EXIT_USAGE)
        if samples is not None and task is not None:
            fail("give --samples or --task, not both", EXIT_USAGE)
        m.engine.check_out(out)
        texts = source = None
        if samples is not None:
            texts, source = m.samples.read_samples_file(samples), str(samples)
        parsed_weights = _parse_weights(weights)
        sources = m.open_sources(models)
        max_len = 128
        if method == "recall" and texts is None:
            ref = sources[m.engine.find_reference(sources, reference)]
            texts, source, max_len = m.samples.task_samples(task, ref)
        elif method == "recall":
            ref = sources[m.engine.find_reference(sources, reference)]
            max_len = int(((ref.recipe or {}).get("task") or {}).get("max_seq_length", 128))
        options = m.MergeOptions(
            reference=reference, texts=texts, samples_source=source,
            clusters=clusters or m.DEFAULT_CLUSTERS, pool=pool or m.DEFAULT_POOL,
            temperature=temperature or m.DEFAULT_TEMPERATURE, gamma=_parse_gamma(gamma),
            max_seq_length=max_len, weights=parsed_weights, lam=lam, density=density, seed=seed,
            device=resolve_device(device),
        )
        chosen, record = m.build_method(method, sources, options)
        anchors = m.engine.base_anchors(sources, base) if chosen.needs_base else None
        result = m.merge(sources, chosen, out, anchors=anchors, record=record)
        scores = _evaluate(result, sources, device) if evaluate else None
        if as_json:
            typer.echo(json.dumps({**result.record, **({"scores": scores} if scores else {})}, indent=2))
            return
        _print(result, scores)

    run_guarded(go, interrupted_hint=None)


def _parse_weights(text: str | None) -> tuple[float, ...] | None:
    if text is None:
        return None
    from .merge import MergeError

    try:
        return tuple(float(w) for w in text.split(","))
    except ValueError:
        raise MergeError(f"--weights {text}: give numbers separated by commas, one per model (e.g. 0.5,0.5)") from None


def _parse_gamma(text: str | None):
    from .merge import DEFAULT_GAMMA, MergeError

    if text is None or text in ("median", "hidden"):
        return text or DEFAULT_GAMMA
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise MergeError(f"--gamma {text}: use median, hidden or a positive number")
    return value


def _evaluate(result, sources, device: str) -> list[dict]:
    """Each source with a known task scored alone and merged, on that task's dev split."""
    from .evaluate import evaluate_checkpoint

    rows = []
    for s in sources:
        if s.task is None or not s.head:
            continue
        alone = evaluate_checkpoint(s.run_dir or s.folder, device=device)
        merged = evaluate_checkpoint(result.outputs[s.name], device=device)
        rows.append({"model": s.name, "task": alone["task"], "metric": "main",
                     "individual": alone["metrics"]["main"], "merged": merged["metrics"]["main"]})
    return rows


def _print(result, scores) -> None:
    from rich.table import Table

    from .console import out_console

    record = result.record
    names = [i["name"] for i in record["inputs"]]
    if "layers" in record:
        table = Table(title=f"RECALL weights (similarity) — reference {record['reference']}, "
                            f"tau {record['temperature']:g}, gamma {record['gamma_rule']}, {record['clusters']} samples")
        table.add_column("layer")
        for name in names:
            table.add_column(name, justify="right")
        last = len(record["layers"]) - 1
        for row in record["layers"]:
            label = "0 embeddings" if row["layer"] == 0 else f"{row['layer']}" + (" +pooler" if row["layer"] == last else "")
            table.add_row(label, *(f"{w:.3f} ({s:.3f})" for w, s in zip(row["weight"], row["similarity"])))
        out_console.print(table)
    else:
        settings = {k: record[k] for k in ("weights", "lambda", "density") if k in record}
        out_console.print(f"{record['method']} merge of {', '.join(names)} {json.dumps(settings) if settings else ''}".rstrip())
    if scores:
        table = Table(title="dev score (main metric): individual vs merged")
        for column in ("model", "task", "individual", "merged", "change"):
            table.add_column(column, justify="left" if column in ("model", "task") else "right")
        for row in scores:
            table.add_row(row["model"], row["task"], f"{row['individual']:.4f}", f"{row['merged']:.4f}",
                          f"{row['merged'] - row['individual']:+.4f}")
        mean_i = sum(r["individual"] for r in scores) / len(scores)
        mean_m = sum(r["merged"] for r in scores) / len(scores)
        table.add_row("average", "", f"{mean_i:.4f}", f"{mean_m:.4f}", f"{mean_m - mean_i:+.4f}")
        out_console.print(table)
    out_console.print(f"wrote {result.out}: " + ", ".join(f"{n}/" for n in result.outputs) + ", merge.json")
