#!/usr/bin/env python3
"""make_pref_fixture.py — reference values for the preference losses of runtime/train/pref.c
(v2195 DPO, v2196 ORPO, v2197 SimPO, v2198 KTO), written the way huggingface/trl computes them:

  DPO   (DPOTrainer.dpo_loss, loss_type "sigmoid"): logits = (pc - pr) - (rc - rr);
        losses = -logsigmoid(beta * logits) * (1 - ls) - logsigmoid(-beta * logits) * ls;
        rewards = beta * (p - ref); summed log-probs.
  ORPO  (ORPOTrainer.odds_ratio_loss): average log-probs a; log_odds = (a_c - a_r) -
        (log1p(-exp(a_c)) - log1p(-exp(a_r))); loss = NLL(chosen tokens) - mean(beta * logsigmoid
        (log_odds)); rewards = beta * a.
  SimPO (CPOTrainer.cpo_loss, loss_type "simpo", cpo_alpha 0): average log-probs; logits = a_c -
        a_r - gamma / beta; losses as DPO's; rewards = beta * a.
  KTO   (KTOTrainer.kto_loss): kl = mean(pk - rk).clamp(min=0), detached; desirable: 1 -
        sigmoid(beta * (p - r - kl)), undesirable: 1 - sigmoid(beta * (kl - (p - r))), weighted;
        loss = mean over all examples.

  Distillation (v2149, Hinton et al.; DistilBERT's loss): per token alpha * T^2 *
        KL(softmax(teacher / T) || softmax(student / T)) + (1 - alpha) * CE(student, y), the gradient
        w.r.t. the student's logits ("distill" cases).

Per-sequence log-probs are random float64 inputs; torch autograd gives d loss / d (summed policy
log-prob) of every sequence. Writes tests/fixtures/pref_losses.json (committed; CI never runs
this). Needs torch (pip install torch). Run from the repo root:
    python3 tests/reference/make_pref_fixture.py
"""
import json
import os

import torch
import torch.nn.functional as F

torch.manual_seed(2195)
D = torch.float64


def rnd(n, lo, hi):
    return (torch.rand(n, dtype=D) * (hi - lo) + lo)


def pair_case(kind, n, **kw):
    lc = torch.randint(3, 40, (n,))
    lr = torch.randint(3, 40, (n,))
    pc = (-rnd(n, 0.3, 3.0) * lc).requires_grad_()
    pr = (-rnd(n, 0.3, 3.0) * lr).requires_grad_()
    rc = pc.detach() + rnd(n, -4, 4)
    rr = pr.detach() + rnd(n, -4, 4)
    beta, ls = kw.get("beta", 0.1), kw.get("label_smoothing", 0.0)
    if kind == "dpo":
        logits = (pc - pr) - (rc - rr)
        losses = -F.logsigmoid(beta * logits) * (1 - ls) - F.logsigmoid(-beta * logits) * ls
        loss = losses.mean()
        cw, rw = beta * (pc - rc), beta * (pr - rr)
    elif kind == "simpo":
        gamma = kw["gamma"]
        ac, ar = pc / lc, pr / lr
        logits = (ac - ar) - gamma / beta
        losses = -F.logsigmoid(beta * logits) * (1 - ls) - F.logsigmoid(-beta * logits) * ls
        loss = losses.mean()
        cw, rw = beta * ac, beta * ar
    elif kind == "orpo":
        lam = kw["lambda"]
        ac, ar = pc / lc, pr / lr
        log_odds = (ac - ar) - (torch.log1p(-torch.exp(ac)) - torch.log1p(-torch.exp(ar)))
        ratio = F.logsigmoid(log_odds)
        nll = -pc.sum() / lc.sum()
        loss = nll - (lam * ratio).mean()
        cw, rw = lam * ac, lam * ar
    loss.backward()
    return {
        "objective": kind, "params": kw, "n": n,
        "pc": pc.detach().tolist(), "pr": pr.detach().tolist(), "rc": rc.tolist(), "rr": rr.tolist(),
        "lc": lc.tolist(), "lr": lr.tolist(),
        "loss": loss.item(), "gc": pc.grad.tolist(), "gr": pr.grad.tolist(),
        "accuracy": (cw > rw).to(D).mean().item(), "margin": (cw - rw).mean().item(),
    }


def kto_case(n, **kw):
    beta, wd, wu = kw["beta"], kw["desirable_weight"], kw["undesirable_weight"]
    label = (torch.rand(n) < 0.5).tolist()
    label[0], label[1] = True, False
    p = (-rnd(n, 5, 80)).requires_grad_()
    r = p.detach() + rnd(n, -6, 6)
    pk = -rnd(n, 5, 80)
    rk = pk + rnd(n, -2, 6) + kw.get("kl_shift", 0.0)
    kl = (pk - rk).mean().clamp(min=0).detach()
    lab = torch.tensor(label)
    lr_ = p - r
    chosen = 1 - torch.sigmoid(beta * (lr_[lab] - kl))
    rejected = 1 - torch.sigmoid(beta * (kl - lr_[~lab]))
    losses = torch.cat((wd * chosen, wu * rejected), 0)
    loss = losses.nanmean()
    loss.backward()
    return {
        "objective": "kto", "params": kw, "n": n, "p": p.detach().tolist(), "r": r.tolist(),
        "label": [int(x) for x in label], "pk": pk.tolist(), "rk": rk.tolist(), "kl": kl.item(),
        "loss": loss.item(), "g": p.grad.tolist(),
        "margin": ((beta * lr_[lab]).mean() - (beta * lr_[~lab]).mean()).item(),
    }


cases = [
    pair_case("dpo", 7, beta=0.1, label_smoothing=0.0),
    pair_case("dpo", 5, beta=0.5, label_smoothing=0.2),
    pair_case("orpo", 6, **{"lambda": 0.1}),
    pair_case("orpo", 4, **{"lambda": 1.5}),
    pair_case("simpo", 6, beta=2.0, gamma=1.0),
    pair_case("simpo", 5, beta=2.5, gamma=0.3, label_smoothing=0.1),
    kto_case(8, beta=0.1, desirable_weight=1.0, undesirable_weight=1.0),
    kto_case(9, beta=0.5, desirable_weight=1.33, undesirable_weight=0.7, kl_shift=-4.0),
]
def distill_case(V, T, alpha):
    z = (torch.randn(V, dtype=D) * 3).requires_grad_()
    zt = torch.randn(V, dtype=D) * 3
    y = int(torch.randint(0, V, (1,)))
    kl = F.kl_div(F.log_softmax(z / T, -1), F.log_softmax(zt / T, -1), log_target=True, reduction="sum")
    loss = alpha * T * T * kl + (1 - alpha) * F.cross_entropy(z[None], torch.tensor([y]))
    loss.backward()
    return {"objective": "distill", "params": {"temperature": T, "alpha": alpha}, "n": V, "z": z.detach().tolist(),
            "zt": zt.tolist(), "y": y, "loss": loss.item(), "g": z.grad.tolist()}


cases += [distill_case(37, 2.0, 0.5), distill_case(64, 1.0, 1.0), distill_case(50, 4.0, 0.2)]
out = os.path.join(os.path.dirname(__file__), "..", "fixtures", "pref_losses.json")
with open(out, "w") as f:
    json.dump({"made_by": "tests/reference/make_pref_fixture.py (torch %s, float64)" % torch.__version__,
               "cases": cases}, f, indent=1)
print("wrote", os.path.normpath(out), len(cases), "cases")
