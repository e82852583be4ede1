"""RecAdam against a float64 transcription of its update rule, its fast path against its simple one,
and the limits the paper's method must reduce to."""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch

from recall_cli.optim import RecAdam, anneal_lambda, distance_to_theta_star

STEPS = 60


def tiny_mlp(dtype=torch.float64, seed=0) -> torch.nn.Module:
    torch.manual_seed(seed)
    body = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.Tanh())
    model = torch.nn.Sequential(body, torch.nn.Linear(8, 3))  # [1] is the "classifier head"
    return model.to(dtype)


def body_params(model):
    return list(model[0].parameters())


def head_params(model):
    return list(model[1].parameters())


def shifted_anchors(params, seed=1):
    """theta* away from the starting point, so that the recall penalty does real work."""
    gen = torch.Generator().manual_seed(seed)
    return [p.detach() + 0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in params]


def batches(n, dtype=torch.float64, seed=2):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 6, generator=gen, dtype=dtype), torch.randint(0, 3, (16,), generator=gen)) for _ in range(n)]


def loss_of(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


class Reference:
    """The update rule of the issue, written out in plain float64 arithmetic, one tensor at a time."""

    def __init__(self, params, theta_star, *, lr, betas, eps, weight_decay, correct_bias, anneal_fun, k, t0, w,
                 gamma, mode="decoupled", lam_fn=None, floor=0.0):
        self.params = params
        self.theta_star = theta_star  # None for head parameters
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0
        self.hp = dict(lr=lr, b1=betas[0], b2=betas[1], eps=eps, wd=weight_decay, cb=correct_bias)
        self.lam_fn = lam_fn or (lambda t: anneal_lambda(anneal_fun, t, k, t0, w))
        self.w, self.gamma, self.mode, self.floor = w, gamma, mode, floor

    @torch.no_grad()
    def step(self):
        self.t += 1
        t, h = self.t, self.hp
        for i, p in enumerate(self.params):
            g = p.grad.clone()
            anchor = self.theta_star[i]
            anchored = anchor is not None and self.w > 0
            lam = self.lam_fn(t) if anchored else 1.0
            weight = max(self.w - lam, self.floor)  # the penalty's weight: never below the floor
            if anchored and self.mode == "coupled":
                g = lam * g + weight * self.gamma * (p - anchor)
            self.m[i] = h["b1"] * self.m[i] + (1 - h["b1"]) * g
            self.v[i] = h["b2"] * self.v[i] + (1 - h["b2"]) * g * g
            step_size = h["lr"] * math.sqrt(1 - h["b2"] ** t) / (1 - h["b1"] ** t) if h["cb"] else h["lr"]
            denom = self.v[i].sqrt() + h["eps"]
            if anchored and self.mode == "decoupled":
                p -= step_size * lam * self.m[i] / denom
                p -= h["lr"] * weight * self.gamma * (p - anchor)
            else:
                p -= step_size * self.m[i] / denom
            p -= h["lr"] * h["wd"] * p


HP = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, anneal_k=0.3, anneal_t0=20, anneal_w=1.0, pretrain_cof=50.0)


def run_pair(*, anneal_fun, weight_decay, correct_bias, foreach, mode="decoupled", steps=STEPS, hp=HP, lam_fn=None,
             fused=None, floor=None):
    """Train the same model with RecAdam and with the transcription; return both for comparison."""
    model = tiny_mlp()
    ref_model = copy.deepcopy(model)
    theta_star = shifted_anchors(body_params(model))
    opt = RecAdam(
        [
            {"params": body_params(model), "anchors": theta_star, "weight_decay": weight_decay},
            {"params": head_params(model), "weight_decay": 0.0},  # the head: plain Adam
        ],
        anneal_fun=anneal_fun, correct_bias=correct_bias, foreach=foreach, fused=fused, mode=mode, **hp,
        **({} if floor is None else {"recall_floor": floor}),
    )
    ref_body = Reference(
        body_params(ref_model), theta_star, lr=hp["lr"], betas=hp["betas"], eps=hp["eps"], weight_decay=weight_decay,
        correct_bias=correct_bias, anneal_fun=anneal_fun, k=hp["anneal_k"], t0=hp["anneal_t0"], w=hp["anneal_w"],
        gamma=hp["pretrain_cof"], mode=mode, lam_fn=lam_fn, floor=floor or 0.0,
    )
    ref_head = Reference(
        head_params(ref_model), [None, None], lr=hp["lr"], betas=hp["betas"], eps=hp["eps"], weight_decay=0.0,
        correct_bias=correct_bias, anneal_fun=anneal_fun, k=hp["anneal_k"], t0=hp["anneal_t0"], w=hp["anneal_w"],
        gamma=hp["pretrain_cof"], mode=mode,
    )
    for x, y in batches(steps):
        for m in (model, ref_model):
            m.zero_grad()
            loss_of(m, x, y).backward()
        opt.step()
        ref_body.step()
        ref_head.step()
    return model, opt, ref_model, ref_body, ref_head


def assert_matches_reference(model, opt, ref_model, ref_body, ref_head, atol=1e-10):
    for p, q in zip(model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(p, q, atol=atol, rtol=0)
    for params, ref in ((body_params(model), ref_body), (head_params(model), ref_head)):
        for i, p in enumerate(params):
            torch.testing.assert_close(opt.state[p]["exp_avg"], ref.m[i], atol=atol, rtol=0)
            torch.testing.assert_close(opt.state[p]["exp_avg_sq"], ref.v[i], atol=atol, rtol=0)
            assert opt.state[p]["step"] == ref.t == STEPS


@pytest.mark.slow
@pytest.mark.parametrize("foreach", [False, True], ids=["single", "foreach"])
@pytest.mark.parametrize("correct_bias", [True, False], ids=["bias_corr", "no_bias_corr"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01], ids=["no_wd", "wd"])
@pytest.mark.parametrize("anneal_fun", ["sigmoid", "linear", "constant"])
def test_matches_float64_transcription(anneal_fun, weight_decay, correct_bias, foreach):
    hp = dict(HP, anneal_w=0.8) if anneal_fun == "constant" else HP  # constant with w=1 has no penalty
    result = run_pair(anneal_fun=anneal_fun, weight_decay=weight_decay, correct_bias=correct_bias, foreach=foreach, hp=hp)
    assert_matches_reference(*result)
    model = result[0]
    # The run did move: the comparison is not between two untouched models.
    assert (body_params(model)[0] - body_params(tiny_mlp())[0]).abs().max() > 1e-3


@pytest.mark.parametrize("weight_decay", [0.0, 0.01], ids=["no_wd", "wd"])
@pytest.mark.parametrize("anneal_fun", ["sigmoid", "linear", "constant"])
def test_fused_kernel_matches_float64_transcription(anneal_fun, weight_decay):
    """torch's fused Adam kernel with eps / sqrt(1 - beta2**t) is the released eps convention exactly."""
    hp = dict(HP, anneal_w=0.8) if anneal_fun == "constant" else HP
    result = run_pair(anneal_fun=anneal_fun, weight_decay=weight_decay, correct_bias=True, foreach=None, hp=hp,
                      fused=True)
    assert_matches_reference(*result)


@pytest.mark.parametrize("floor", [0.05, 0.3])
@pytest.mark.parametrize("kernel, mode", [("single", "decoupled"), ("foreach", "decoupled"), ("fused", "decoupled"),
                                          ("single", "coupled"), ("foreach", "coupled")])
@pytest.mark.slow
@pytest.mark.parametrize("anneal_fun", ["sigmoid", "linear"])
def test_recall_floor_matches_float64_transcription(anneal_fun, kernel, mode, floor):
    """pull = lr * max(anneal_w - lambda, floor) * gamma in every kernel; lambda still weighs the task."""
    result = run_pair(anneal_fun=anneal_fun, weight_decay=0.01, correct_bias=True, mode=mode, floor=floor,
                      foreach={"single": False, "foreach": True, "fused": None}[kernel], fused=kernel == "fused" or None)
    assert_matches_reference(*result)
    # The floor binds: after t0 + a few 1/k (20 + 3/0.3 = 30 of the steps) anneal_w - lambda is below it.
    lam = anneal_lambda(anneal_fun, STEPS, HP["anneal_k"], HP["anneal_t0"], HP["anneal_w"])
    assert HP["anneal_w"] - lam < floor
    unfloored = run_pair(anneal_fun=anneal_fun, weight_decay=0.01, correct_bias=True, mode=mode,
                         foreach={"single": False, "foreach": True, "fused": None}[kernel], fused=kernel == "fused" or None)[0]
    theta_star = shifted_anchors(body_params(tiny_mlp()))
    far = sum(float((p.detach() - a).norm()) for p, a in zip(body_params(unfloored), theta_star))
    near = sum(float((p.detach() - a).norm()) for p, a in zip(body_params(result[0]), theta_star))
    assert near < far  # the floor keeps the body nearer theta*


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["single", "foreach", "fused"])
def test_recall_floor_zero_is_bit_identical_to_no_floor(kernel):
    kwargs = dict(anneal_fun="sigmoid", weight_decay=0.01, correct_bias=True,
                  foreach={"single": False, "foreach": True, "fused": None}[kernel], fused=kernel == "fused" or None)
    plain, floored = run_pair(**kwargs)[:2], run_pair(**kwargs, floor=0.0)[:2]
    for p, q in zip(plain[0].parameters(), floored[0].parameters()):
        assert torch.equal(p, q)
    for p, q in zip(plain[0].parameters(), floored[0].parameters()):
        assert torch.equal(plain[1].state[p]["exp_avg_sq"], floored[1].state[q]["exp_avg_sq"])


@pytest.mark.parametrize("floor", [-0.01, 1.5, float("nan"), float("inf")])
def test_recall_floor_outside_zero_to_anneal_w_is_refused(floor):
    with pytest.raises(ValueError, match="recall_floor must be in \\[0, anneal_w = 1\\]"):
        RecAdam([torch.nn.Parameter(torch.zeros(2))], recall_floor=floor)


@pytest.mark.slow
def test_default_kernel_on_cpu_is_fused_else_single_tensor():
    """Defaults: fused where it applies; otherwise the one-tensor kernel on the CPU (bit-identical to
    foreach=False), which benchmarks/optimizer_step.py measures at about half the foreach time there."""
    fused_default = run_pair(anneal_fun="sigmoid", weight_decay=0.01, correct_bias=True, foreach=None)[0]
    fused_explicit = run_pair(anneal_fun="sigmoid", weight_decay=0.01, correct_bias=True, foreach=None, fused=True)[0]
    for p, q in zip(fused_default.parameters(), fused_explicit.parameters()):
        assert torch.equal(p, q)
    # correct_bias=False and the coupled mode have no fused kernel: the default is then the single-tensor one.
    for kwargs in (dict(correct_bias=False), dict(correct_bias=True, mode="coupled")):
        default = run_pair(anneal_fun="sigmoid", weight_decay=0.01, foreach=None, **kwargs)[0]
        single = run_pair(anneal_fun="sigmoid", weight_decay=0.01, foreach=False, **kwargs)[0]
        for p, q in zip(default.parameters(), single.parameters()):
            assert torch.equal(p, q)


def test_fused_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match="choose one of fused=True and foreach=True"):
        RecAdam([torch.nn.Parameter(torch.zeros(2))], fused=True, foreach=True)
    p = torch.nn.Parameter(torch.zeros(2))
    opt = RecAdam([{"params": [p], "anchors": [torch.ones(2)]}], fused=True, correct_bias=False)
    p.grad = torch.ones(2)
    with pytest.raises(RuntimeError, match="needs correct_bias=True"):
        opt.step()


@pytest.mark.parametrize("foreach", [False, True], ids=["single", "foreach"])
def test_coupled_mode_matches_its_transcription(foreach):
    result = run_pair(anneal_fun="sigmoid", weight_decay=0.01, correct_bias=True, foreach=foreach, mode="coupled")
    assert_matches_reference(*result)


@pytest.mark.slow
def test_coupled_and_decoupled_differ():
    coupled = run_pair(anneal_fun="sigmoid", weight_decay=0.0, correct_bias=True, foreach=True, mode="coupled")[0]
    decoupled = run_pair(anneal_fun="sigmoid", weight_decay=0.0, correct_bias=True, foreach=True)[0]
    diff = max((p - q).abs().max().item() for p, q in zip(coupled.parameters(), decoupled.parameters()))
    assert diff > 1e-3


def make_float32_setup(foreach, anchor_dtype=None, fused=None):
    torch.manual_seed(0)
    model = tiny_mlp(torch.float32)
    unused = torch.nn.Parameter(torch.randn(5))  # never in the loss: grad stays None
    empty = torch.nn.Parameter(torch.zeros(0))  # zero-size, anchored
    body = body_params(model)
    theta_star = shifted_anchors(body) + [unused.detach().clone(), torch.zeros(0)]
    opt = RecAdam(
        [
            {"params": body + [unused, empty], "anchors": theta_star, "weight_decay": 0.01},
            {"params": head_params(model), "weight_decay": 0.0},
        ],
        foreach=foreach, fused=fused, anchor_dtype=anchor_dtype, **HP,
    )
    return model, unused, empty, opt


def train_steps(model, empty, opt, data):
    for x, y in data:
        opt.zero_grad()
        loss = loss_of(model, x, y)
        loss.backward()
        empty.grad = torch.zeros(0)
        opt.step()


KERNELS = {"single": dict(foreach=False), "foreach": dict(foreach=True), "fused": dict(fused=True)}


@pytest.mark.parametrize("anchor_dtype", [None, torch.bfloat16], ids=["fp32_anchor", "bf16_anchor"])
@pytest.mark.parametrize("kernel", ["foreach", "fused"])
def test_fast_kernels_match_single_tensor(kernel, anchor_dtype):
    """In float32, with a parameter whose grad stays None and a zero-size anchored parameter."""
    data = batches(40, torch.float32)
    results = []
    for name in ("single", kernel):
        options = KERNELS[name]
        model, unused, empty, opt = make_float32_setup(options.get("foreach"), anchor_dtype, fused=options.get("fused"))
        before = unused.detach().clone()
        train_steps(model, empty, opt, data)
        assert torch.equal(unused, before) and "step" not in opt.state.get(unused, {})
        assert opt.state[empty]["step"] == 40
        results.append((model, opt))
    (m1, o1), (m2, o2) = results
    for p, q in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
        # torch's fused kernel orders the float32 moment arithmetic its own way: over 40 steps an element
        # of m near cancellation drifts by ~2e-9 (the float64 transcription test holds it to 1e-10).
        torch.testing.assert_close(o1.state[p]["exp_avg"], o2.state[q]["exp_avg"], rtol=1e-6,
                                   atol=1e-8 if kernel == "fused" else 1e-9)
        torch.testing.assert_close(o1.state[p]["exp_avg_sq"], o2.state[q]["exp_avg_sq"], rtol=1e-6, atol=1e-12)
    if anchor_dtype is not None:
        assert all(a.dtype == torch.bfloat16 for _, a in o2.anchored())


def test_state_dict_round_trip_continues_bit_identically():
    data = batches(30, torch.float32)
    model, unused, empty, opt = make_float32_setup(True)
    train_steps(model, empty, opt, data[:15])

    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, buffer)
    saved = opt.state_dict()
    assert all("anchor" not in per_param for per_param in saved["state"].values())
    assert all("anchors" not in group for group in saved["param_groups"])

    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    model2, unused2, empty2, opt2 = make_float32_setup(True)  # rebuilt with its anchors, as the trainer does
    model2.load_state_dict(loaded["model"])
    opt2.load_state_dict(loaded["optim"])
    assert len(list(opt2.anchored())) == len(list(opt.anchored()))

    train_steps(model, empty, opt, data[15:])
    train_steps(model2, empty2, opt2, data[15:])
    for p, q in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p, q)
        assert torch.equal(opt.state[p]["exp_avg_sq"], opt2.state[q]["exp_avg_sq"])


def test_large_k_and_t0_zero_is_adamw():
    """With lambda == 1 from the first step there is no penalty: RecAdam is AdamW."""
    torch.manual_seed(0)
    model = tiny_mlp()
    twin = copy.deepcopy(model)
    params = list(model.parameters())
    opt = RecAdam([{"params": params, "anchors": shifted_anchors(params)}], lr=1e-3, eps=1e-12,
                  anneal_fun="sigmoid", anneal_k=100.0, anneal_t0=0, pretrain_cof=5000.0)
    # torch puts eps outside the bias correction of sqrt(v); with eps -> 0 the two conventions agree.
    adamw = torch.optim.AdamW(twin.parameters(), lr=1e-3, eps=1e-12 / 1e6, weight_decay=0.0)
    for x, y in batches(50):
        for m, o in ((model, opt), (twin, adamw)):
            o.zero_grad()
            loss_of(m, x, y).backward()
            o.step()
    assert opt.current_lambda == 1.0
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, atol=1e-9, rtol=0)


@pytest.mark.slow
def test_small_k_is_the_constant_half_weight_multitask_objective():
    w = 0.8
    assert anneal_lambda("sigmoid", 1, 1e-12, 250, w) == pytest.approx(w / 2, abs=1e-9)
    assert anneal_lambda("sigmoid", 10_000, 1e-12, 250, w) == pytest.approx(w / 2, abs=1e-7)
    hp = dict(HP, anneal_k=1e-12, anneal_w=w)
    result = run_pair(anneal_fun="sigmoid", weight_decay=0.0, correct_bias=True, foreach=True, hp=hp,
                      lam_fn=lambda t: w / 2)
    assert_matches_reference(*result, atol=1e-9)
    assert result[1].current_lambda == pytest.approx(w / 2, abs=1e-9)


@pytest.mark.parametrize("foreach", [False, True], ids=["single", "foreach"])
def test_penalty_pulls_back_toward_anchor_at_the_rate_of_the_rule(foreach):
    """With a zero task gradient only the recall term acts: each step removes lr*(w-lambda)*gamma of theta-theta*."""
    p = torch.nn.Parameter(torch.full((10,), 3.0, dtype=torch.float64))
    anchor = torch.zeros(10, dtype=torch.float64)
    lr, gamma, k, t0 = 1e-4, 1000.0, 0.5, 10
    opt = RecAdam([{"params": [p], "anchors": [anchor]}], lr=lr, anneal_k=k, anneal_t0=t0, pretrain_cof=gamma,
                  foreach=foreach)
    expected = distance_to_theta_star([p], [anchor])
    distances = []
    for t in range(1, 31):
        p.grad = torch.zeros_like(p)
        opt.step()
        expected *= 1 - lr * (1 - anneal_lambda("sigmoid", t, k, t0)) * gamma
        distances.append(distance_to_theta_star([p], [anchor]))
        assert distances[-1] == pytest.approx(expected, rel=1e-12)
    assert all(b < a for a, b in zip(distances, distances[1:]))
    assert distances[-1] < 0.5 * distances[0]


def test_anneal_lambda_values():
    assert anneal_lambda("sigmoid", 250, 0.1, 250) == 0.5
    assert anneal_lambda("sigmoid", 260, 0.1, 250) == pytest.approx(1 / (1 + math.exp(-1)))
    assert anneal_lambda("sigmoid", 1, 50.0, 10_000) == pytest.approx(0.0, abs=1e-300)  # no overflow
    assert anneal_lambda("linear", 50, 0.0, 200, 0.5) == pytest.approx(0.125)
    assert anneal_lambda("linear", 500, 0.0, 200) == 1.0
    assert anneal_lambda("constant", 3, 0.0, 0, 0.7) == 0.7
    with pytest.raises(ValueError, match="unknown anneal_fun 'cosine'"):
        anneal_lambda("cosine", 1, 0.1, 10)
    with pytest.raises(ValueError, match="anneal_t0 > 0"):
        anneal_lambda("linear", 1, 0.1, 0)


def test_invalid_construction_is_refused_with_the_problem_named():
    model = tiny_mlp()
    params = body_params(model)
    with pytest.raises(ValueError, match="unknown anneal_fun 'cosine'"):
        RecAdam([{"params": params, "anchors": shifted_anchors(params)}], anneal_fun="cosine")
    with pytest.raises(ValueError, match=r"anchor shape \(3,\) differs from parameter shape \(8, 6\)"):
        RecAdam([{"params": params, "anchors": [torch.zeros(3)] + shifted_anchors(params)[1:]}])
    with pytest.raises(ValueError, match="pretrain_cof must be > 0"):
        RecAdam([{"params": params, "anchors": shifted_anchors(params)}], pretrain_cof=0.0)
    with pytest.raises(ValueError, match="'anchors' has 1 tensors but 'params' has 4"):
        RecAdam([{"params": params, "anchors": shifted_anchors(params)[:1]}])
    with pytest.raises(ValueError, match="unknown mode 'sideways'"):
        RecAdam(params, mode="sideways")
    # The head group without anchors accepts pretrain_cof=0: it has nothing to recall.
    RecAdam([{"params": head_params(model), "pretrain_cof": 0.0}])


def test_grad_scaler_and_clipping():
    """scaler.step(opt) unscales before RecAdam sees the gradients: same result as an unscaled step."""
    data = batches(5, torch.float32)
    finals = []
    for use_scaler in (False, True):
        torch.manual_seed(0)
        model = tiny_mlp(torch.float32)
        params = body_params(model)
        opt = RecAdam([{"params": params, "anchors": shifted_anchors(params)}, {"params": head_params(model)}], **HP)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, enabled=use_scaler)
        for x, y in data:
            opt.zero_grad()
            scaler.scale(loss_of(model, x, y)).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            scaler.step(opt)
            scaler.update()
        finals.append([p.detach().clone() for p in model.parameters()])
    for p, q in zip(*finals):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


def test_anchor_copy_is_independent_of_the_caller_tensor():
    p = torch.nn.Parameter(torch.ones(4))
    opt = RecAdam([{"params": [p], "anchors": [p]}], lr=0.1, pretrain_cof=1.0, anneal_k=100.0, anneal_t0=0)
    p.grad = torch.ones(4)
    opt.step()
    (_, anchor), = opt.anchored()
    assert torch.equal(anchor, torch.ones(4))
    assert not torch.equal(p.detach(), torch.ones(4))
