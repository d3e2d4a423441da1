#!/usr/bin/env python3
"""make_shampoo_fixtures.py — reference runs of v2139 Shampoo on the tiny GPT-2 and Llama fixture
models of make_fixtures.py (the same seeded weights and batch as make_optim_fixtures.py's base():
seed 1234 / 5678), 10 steps on that batch, with the loss before each step and EVERY parameter
after EVERY step stored, so tests/unit/test_shampoo_v2139.c compares the trainer step by step. CI
never runs this script; the fixtures it wrote are committed. Re-run from the repo root:

    python3 tests/reference/make_shampoo_fixtures.py

No Shampoo package is used: Distributed Shampoo (facebookresearch/optimizers) is not on PyPI,
so its equations are written out here, in float64 (torch.linalg.eigh for the roots), as the
trainer documents them (runtime/train/optim_shampoo.c):
  * 2-D tensors (embeddings, head and all matrices) on blocked Shampoo: each [R, K] matrix cut
    into blocks of at most bs x bs (row-major block order, the last ones smaller, torch.split);
    per block L = s*L + (1-s) G G^T, R = s*R + (1-s) G^T G (s = 1: plain sums); at steps t >= start
    with t == start or t % freq == 0 the inverse roots (L/(1-s^t) + eps I)^(-1/p) from the
    eigendecomposition (eigenvalues clamped at 0); from t >= start the direction of block b is
    root(L) mh root(R) rescaled to the Frobenius norm of the grafted direction of that block
    (Adam: mh / (sqrt(v/(1-b2^t)) + eps_adam), SGD: mh), mh = m/(1-b1^t), m and v Adam's moments of
    the raw gradient; before start the grafted direction alone; W = W*(1 - lr*wd) - lr*D.
  * 1-D tensors (norm gains, biases) on AdamW with weight decay 0.
Configurations (also in each file's metadata):
  * ref_gpt2_shampoo_tiny: lr 1e-3, betas (0.9, 0.95), eps 1e-8, wd 0.1, block 16 (c_attn
    [96, 32] -> 6 x 2 blocks), statistics beta2 0.999, epsilon 1e-6, freq 3, start 2, p 4, Adam
    grafting (`shampoo_losses`, `step<k>.<name>`); `shampoo_sgd_losses`: the same with SGD grafting.
  * ref_llama_shampoo_tiny: block 24 (uneven: 32 = 24 + 8, 48 = 24 + 24), statistics beta2 1.0
    (plain sums), epsilon 1e-6, freq 2, start 1, p 4, Adam grafting; `shampoo_p2_losses`: the same
    with p 2 (inv_root_override), inverse square roots.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402
import make_optim_fixtures as mof  # noqa: E402
import torch  # noqa: E402

STEPS = 10
CONFIGS = {
    "gpt2": dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, wd=0.1, block=16, stat_beta2=0.999, epsilon=1e-6, freq=3,
                 start=2, root=4, graft="adam"),
    "llama": dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, wd=0.1, block=24, stat_beta2=1.0, epsilon=1e-6, freq=2,
                  start=1, root=4, graft="adam"),
}


def inv_root(S, epsilon, p):
    lam, Q = torch.linalg.eigh(S)
    f = (lam.clamp(min=0) + epsilon) ** (-1.0 / p)
    return (Q * f) @ Q.T


def shampoo_run(params, inputs, targets, cfg):
    p = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    m = {k: torch.zeros_like(v) for k, v in p.items()}
    v2 = {k: torch.zeros_like(v) for k, v in p.items()}
    stats, roots = {}, {}
    b1, b2 = cfg["betas"]
    s, bs, lr = cfg["stat_beta2"], cfg["block"], cfg["lr"]
    losses, steps = [], []
    for t in range(1, STEPS + 1):
        for x in p.values():
            x.grad = None
        loss = mf.loss_fn(mof.MODEL["forward"](p, inputs), targets)
        loss.backward()
        losses.append(loss.item())
        with torch.no_grad():
            for k, w in p.items():
                g = w.grad
                m[k].mul_(b1).add_(g, alpha=1 - b1)
                v2[k].mul_(b2).addcmul_(g, g, value=1 - b2)
                mh = m[k] / (1 - b1 ** t)
                graft = mh / ((v2[k] / (1 - b2 ** t)).sqrt() + cfg["eps"])
                if w.dim() != 2:
                    w.add_(graft, alpha=-lr)  # AdamW, weight decay 0 on 1-D tensors
                    continue
                if cfg["graft"] == "sgd":
                    graft = mh.clone()
                precond = t >= cfg["start"]
                refresh = precond and (t == cfg["start"] or t % cfg["freq"] == 0)
                bc = 1 - s ** t if s < 1 else 1.0
                D = graft.clone()
                for i, (gr, mr) in enumerate(zip(g.split(bs, 0), mh.split(bs, 0))):
                    for j, (G, M) in enumerate(zip(gr.split(bs, 1), mr.split(bs, 1))):
                        key = (k, i, j)
                        if key not in stats:
                            stats[key] = [torch.zeros(G.shape[0], G.shape[0], dtype=G.dtype),
                                          torch.zeros(G.shape[1], G.shape[1], dtype=G.dtype)]
                        L, Rf = stats[key]
                        if s < 1:
                            L.mul_(s).add_(G @ G.T, alpha=1 - s)
                            Rf.mul_(s).add_(G.T @ G, alpha=1 - s)
                        else:
                            L.add_(G @ G.T)
                            Rf.add_(G.T @ G)
                        if refresh:
                            roots[key] = (inv_root(L / bc, cfg["epsilon"], cfg["root"]),
                                          inv_root(Rf / bc, cfg["epsilon"], cfg["root"]))
                        if not precond:
                            continue
                        P = roots[key][0] @ M @ roots[key][1]
                        r0, c0 = i * bs, j * bs
                        A = graft[r0:r0 + G.shape[0], c0:c0 + G.shape[1]]
                        if P.norm() > 0:
                            D[r0:r0 + G.shape[0], c0:c0 + G.shape[1]] = P * (A.norm() / P.norm())
                w.mul_(1 - lr * cfg["wd"])
                w.add_(D, alpha=-lr)
        steps.append({k: x.detach().clone() for k, x in p.items()})
    return torch.tensor(losses, dtype=mf.DT), steps


def build(model):
    mof.MODEL = mof.MODELS[model]
    cfg = CONFIGS[model]
    params, inputs, targets = mof.base()
    losses, steps = shampoo_run(params, inputs, targets, cfg)
    tensors = list(params.items()) + [("inputs", inputs), ("targets", targets), ("shampoo_losses", losses)]
    line = "shampoo: %s loss %.6f, after 10 steps %.6f" % (model, losses[0].item(), losses[-1].item())
    if model == "gpt2":
        sgd_losses, _ = shampoo_run(params, inputs, targets, dict(cfg, graft="sgd"))
        tensors.append(("shampoo_sgd_losses", sgd_losses))
        line += " (SGD grafting: %.6f)" % sgd_losses[-1].item()
    else:
        p2_losses, _ = shampoo_run(params, inputs, targets, dict(cfg, root=2))
        tensors.append(("shampoo_p2_losses", p2_losses))
        line += " (inverse square roots, p 2: %.6f)" % p2_losses[-1].item()
    print(line)
    assert losses[-1] < losses[0], "Shampoo did not reduce the loss"
    for k, st in enumerate(steps, 1):
        tensors += [("step%d.%s" % (k, n), v) for n, v in st.items()]
    mof.write("shampoo", tensors, {"shampoo": "Shampoo equations (blocked, grafted; runtime/train/optim_shampoo.c, "
                                              "Distributed Shampoo's form) %s; float64 eigh roots" % json.dumps(cfg)})


def main():
    torch.set_num_threads(1)
    for model in ("gpt2", "llama"):
        build(model)


if __name__ == "__main__":
    main()
