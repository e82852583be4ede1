"""What a fine-tuned model still knows: CKA, drift, STS and MLM probes against the pretrained θ*.

measures.py holds the pure functions on tensors, sets.py the probe inputs, runner.py the one runner
(``Prober``) that the training loop, `recall probe` and studies call. Nothing here imports the
training loop.
"""

from .measures import debiased_cka, drift, linear_cka, mean_pool, spearman, unbiased_hsic
from .runner import Prober, load_inputs, load_mlm_head, prober_for_run
from .sets import load_pairs, load_texts

__all__ = ["Prober", "debiased_cka", "drift", "linear_cka", "load_inputs", "load_mlm_head",
           "load_pairs", "load_texts", "mean_pool", "prober_for_run", "spearman", "unbiased_hsic"]
