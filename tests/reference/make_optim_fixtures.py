#!/usr/bin/env python3
"""make_optim_fixtures.py — reference runs of the replacement optimizers (issue 14) on the tiny
GPT-2 and Llama fixture models of make_fixtures.py: the same seeded weights and batch as
ref_gpt2_tiny.safetensors (seed 1234) / ref_llama_tiny.safetensors (seed 5678; GQA 4:2, so
Adam-mini's per-head k_proj blocks are exercised; Muon on its gate/up [48, 32] matrices uses the
shape scaling), then 10 optimizer steps on that batch, with the loss before
each step and EVERY parameter after EVERY step stored, so tests/unit/test_reference.c compares the
trainer step by step. CI never runs this script; the fixtures it wrote are committed. Re-run from
the repo root:

    python3 tests/reference/make_optim_fixtures.py                 # every fixture below
    python3 tests/reference/make_optim_fixtures.py --only gpt2_muon    # just one

Models and conventions are make_fixtures.py's (imported from there); the references run in
float64 from float32 weights; stored F32. Tensors: the initial weights by name, `inputs`,
`targets`, `<opt>_losses` [10] (the loss before update i+1) and `step<k>.<name>` (k = 1..10) the
weights after update k.

  * muon (ref_gpt2_muon_tiny, v2138): KellerJordan/Muon's MuonWithAuxAdam update, written out
    here from its equations (the package is not on PyPI; github.com/KellerJordan/Muon muon.py:
    zeropower_via_newtonschulz5, muon_update, adam_update): hidden matrices (c_attn, attn.c_proj,
    mlp.c_fc, mlp.c_proj weights) on Muon with lr 0.02, momentum 0.95, Nesterov, 5 quintic
    Newton-Schulz steps (3.4445, -4.7750, 2.0315), scale max(1, rows/cols)^0.5, weight decay 0.1;
    everything else on the reference's Adam (lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight decay
    0.1 on the 2-D embeddings, 0 on 1-D tensors). ONE deliberate difference from the reference:
    Newton-Schulz runs in float64, not bf16 (the reference's bf16 is a GPU speed choice; our cpu
    step runs fp32 sgemm, and a bf16 reference would differ from both by bf16 rounding, ~4e-3
    relative per step). `muon_bf16_losses` holds the losses of the same run with bf16
    Newton-Schulz, as the reference does it, to show the size of that choice.
    `muonm_losses`: the "match_adamw" scaling (0.2*sqrt(max(rows, cols)),
    Moonlight, arXiv 2502.16982) with the Muon LR equal to Adam's (1e-3).
  * schedulefree (ref_gpt2_schedulefree_tiny, v2137): PyPI schedulefree's AdamWScheduleFree
    (`pip install schedulefree`, installed by this script when missing), lr 1e-3 constant
    (warmup_steps 0, r 0, weight_lr_power 2), betas (0.9, 0.999), eps 1e-8, weight decay 0.1 on
    2-D tensors, 0 on 1-D; optimizer.train() before the steps. `step<k>.<name>` is y (the
    parameters in train mode) after step k; `x10.<name>` the average x after step 10
    (optimizer.eval()), `sf_eval_loss` the loss at x.
  * adam_mini (ref_gpt2_adam_mini_tiny, v2136): PyPI adam-mini's Adam_mini (`pip install
    adam-mini`, installed by this script when missing), lr 1e-3, betas (0.9, 0.95), eps 1e-8,
    weight decay 0.1 (the package exempts names with norm/ln/bias), dim 32, 4 heads. The fused
    c_attn weight is given to it as q_proj/k_proj/v_proj leaves (and attn.c_proj as o_proj) so its
    name rules apply the paper's partition; wte/wpe join its Adam blocks (see am_run).
    `am_losses`, `step<k>.<name>` as above (c_attn.weight = cat(q, k, v)).
  * sophia (ref_gpt2_sophia_tiny, v2135): Sophia-G, the SophiaG class of github.com/Liuhong99/Sophia
    (sophia.py, not on PyPI; the PyPI "Sophia" packages are other people's variants) written out
    here from its equations in the rho/bs form of the paper: p *= 1 - lr*wd; m = b1*m + (1-b1)*g;
    p -= lr * sign(m) * min(|m| / (rho*bs*hess + 1e-15), 1); and every k steps, after the step
    (train_sophiag.py: iter_num % k == k - 1), update_hessian: hess = b2*hess + (1-b2)*g_hat^2
    with g_hat the gradient of the mean cross-entropy on labels sampled from the model's softmax
    (torch.multinomial, seeded) over bs = the batch's counted tokens. lr 1e-3, betas (0.965,
    0.99), rho 0.04, k 2 (five refreshes in 10 steps), weight decay 0.1 on 2-D tensors, 0 on 1-D.
    The sampled labels are stored (`gnb_labels<t>`, t = 2, 4, ..., -1 where the target is
    ignored) so the test feeds the trainer's GNB backward the same labels; the trainer's own
    sampler is tested separately (tests/unit/test_gnb.c). `h10.<name>` = bs * hess after the last
    refresh (the trainer's state h holds the bs-scaled estimate). The reference's trainer uses
    the next batch for the estimate; here (one fixed batch) it is the same batch, as ours.
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (torch is ensured there)
import torch  # noqa: E402

DT = mf.DT
STEPS = 10
MUON = dict(lr=0.02, momentum=0.95, ns_steps=5, wd=0.1, adam_lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
NS_ABC = (3.4445, -4.7750, 2.0315)


def is_muon_matrix(name, t):
    return t.dim() == 2 and not any(s in name for s in ("wte", "wpe", "embed", "lm_head"))


def newton_schulz5(G, steps, dtype):
    """KellerJordan/Muon zeropower_via_newtonschulz5, in `dtype` (the reference: bfloat16)."""
    a, b, c = NS_ABC
    X = G.to(dtype)
    tr = G.size(-2) > G.size(-1)
    if tr:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if tr:
        X = X.mT
    return X.to(G.dtype)


def muon_run(params, inputs, targets, ns_dtype=DT, scale="spectral", muon_lr=MUON["lr"]):
    p = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    state = {k: {} for k in p}
    losses, steps = [], []
    b1, b2 = MUON["betas"]
    for t in range(1, STEPS + 1):
        for v in p.values():
            v.grad = None
        loss = mf.loss_fn(MODEL['forward'](p, inputs), targets)
        loss.backward()
        losses.append(loss.item())
        with torch.no_grad():
            for k, v in p.items():
                g = v.grad.clone()
                st = state[k]
                if is_muon_matrix(k, v):
                    # muon_update: momentum.lerp_(grad, 1-beta); update = grad.lerp_(momentum, beta)
                    m = st.setdefault("momentum_buffer", torch.zeros_like(v))
                    m.lerp_(g, 1 - MUON["momentum"])
                    u = g.lerp_(m, MUON["momentum"])
                    u = newton_schulz5(u, MUON["ns_steps"], ns_dtype)
                    R, K = v.shape
                    u = u * (max(1, R / K) ** 0.5 if scale == "spectral" else 0.2 * math.sqrt(max(R, K)))
                    v.mul_(1 - muon_lr * MUON["wd"])
                    v.add_(u, alpha=-muon_lr)
                else:
                    # adam_update + MuonWithAuxAdam's decoupled decay
                    m = st.setdefault("exp_avg", torch.zeros_like(v))
                    s2 = st.setdefault("exp_avg_sq", torch.zeros_like(v))
                    m.lerp_(g, 1 - b1)
                    s2.lerp_(g.square(), 1 - b2)
                    upd = (m / (1 - b1 ** t)) / ((s2 / (1 - b2 ** t)).sqrt() + MUON["eps"])
                    wd = MUON["wd"] if v.dim() == 2 else 0.0
                    v.mul_(1 - MUON["adam_lr"] * wd)
                    v.add_(upd, alpha=-MUON["adam_lr"])
        steps.append({k: v.detach().clone() for k, v in p.items()})
    return torch.tensor(losses, dtype=DT), steps


SF = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, wd=0.1)


def ensure(module, package):
    try:
        return __import__(module)
    except ImportError:
        print("make_optim_fixtures: %s not found; installing it from PyPI (pip install %s) ..." % (module, package),
              file=sys.stderr)
        import subprocess
        subprocess.check_call([sys.executable, "-m", "pip", "install", package])
        return __import__(module)


def sf_run(params, inputs, targets):
    """schedulefree.AdamWScheduleFree (the authors' package), weight decay on 2-D tensors only."""
    sf = ensure("schedulefree", "schedulefree")
    p = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    decay = [t for t in p.values() if t.dim() == 2]
    no_decay = [t for t in p.values() if t.dim() != 2]
    opt = sf.AdamWScheduleFree([{"params": decay, "weight_decay": SF["wd"]}, {"params": no_decay, "weight_decay": 0.0}],
                               lr=SF["lr"], betas=SF["betas"], eps=SF["eps"], warmup_steps=0, r=0.0,
                               weight_lr_power=2.0, foreach=False)
    opt.train()
    losses, steps = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = mf.loss_fn(MODEL['forward'](p, inputs), targets)
        loss.backward()
        losses.append(loss.item())
        opt.step()
        steps.append({k: v.detach().clone() for k, v in p.items()})
    opt.eval()  # the parameters become the average x, what evaluation and checkpoints see
    x = {k: v.detach().clone() for k, v in p.items()}
    with torch.no_grad():
        eval_loss = mf.loss_fn(MODEL['forward'](p, inputs), targets)
    return torch.tensor(losses, dtype=DT), steps, x, eval_loss, sf


def build_sf():
    params, inputs, targets = base()
    losses, steps, x, eval_loss, sf = sf_run(params, inputs, targets)
    print("schedule-free: loss %.6f, after 10 steps %.6f (at y), %.6f at x" %
          (losses[0].item(), losses[-1].item(), eval_loss.item()))
    assert losses[-1] < losses[0], "schedule-free AdamW did not reduce the loss"
    tensors = list(params.items()) + [("inputs", inputs), ("targets", targets), ("sf_losses", losses),
                                      ("sf_eval_loss", eval_loss)]
    for k, st in enumerate(steps, 1):
        tensors += [("step%d.%s" % (k, n), v) for n, v in st.items()]
    tensors += [("x10.%s" % n, v) for n, v in x.items()]
    write("schedulefree", tensors, {"schedulefree": "schedulefree %s AdamWScheduleFree %s, warmup_steps=0, r=0, "
                                                    "weight_lr_power=2, wd on 2-D tensors only; step<k>.* = y after "
                                                    "step k (train mode), x10.* = x after 10 (eval mode)"
                                                    % (getattr(sf, "__version__", "?"), json.dumps(SF))})


AM = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, wd=0.1)


def am_run(params, inputs, targets):
    """adam_mini.Adam_mini (the authors' package) on the GPT-2 with its fused c_attn weight split
    into q_proj / k_proj / v_proj leaves and attn.c_proj named o_proj, so the package's name rules
    give the paper's partition (q, k per head; v, attention out, MLP per output neuron; norm gains
    one block each; biases Adam); wte/wpe added to its Adam blocks (the paper's embeddings on
    Adam; 1.1.1 would give them one block per token row)."""
    am = ensure("adam_mini", "adam-mini")
    cfg = MODEL["cfg"]
    C = cfg["C"]
    leaves, named = {}, []
    for k, v in params.items():
        if k.endswith("attn.c_attn.weight"):
            pre = k[: -len("c_attn.weight")]
            for j, part in enumerate(("q_proj", "k_proj", "v_proj")):
                t = v[j * C:(j + 1) * C].detach().clone().requires_grad_(True)
                leaves[pre + part + ".weight"] = t
                named.append((pre + part + ".weight", t))
        else:
            t = v.detach().clone().requires_grad_(True)
            leaves[k] = t
            named.append((k.replace("attn.c_proj.weight", "attn.o_proj.weight"), t))

    def full():
        p = {}
        for k in params:
            if k.endswith("attn.c_attn.weight"):
                pre = k[: -len("c_attn.weight")]
                p[k] = torch.cat([leaves[pre + part + ".weight"] for part in ("q_proj", "k_proj", "v_proj")])
            else:
                p[k] = leaves[k]
        return p

    opt = am.Adam_mini(named, lr=AM["lr"], betas=AM["betas"], eps=AM["eps"], weight_decay=AM["wd"],
                       dim=C, n_heads=cfg["NH"], n_kv_heads=cfg.get("NKV", cfg["NH"]), verbose=False)
    opt.adam_block_names.update({"wte", "wpe", "embed", "lm_head"})
    losses, steps = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = mf.loss_fn(MODEL['forward'](full(), inputs), targets)
        loss.backward()
        losses.append(loss.item())
        opt.step()
        steps.append({k: v.detach().clone() for k, v in full().items()})
    return torch.tensor(losses, dtype=DT), steps, am


def build_am():
    params, inputs, targets = base()
    losses, steps, am = am_run(params, inputs, targets)
    print("adam-mini: loss %.6f, after 10 steps %.6f" % (losses[0].item(), losses[-1].item()))
    assert losses[-1] < losses[0], "Adam-mini did not reduce the loss"
    tensors = list(params.items()) + [("inputs", inputs), ("targets", targets), ("am_losses", losses)]
    for k, st in enumerate(steps, 1):
        tensors += [("step%d.%s" % (k, n), v) for n, v in st.items()]
    import importlib.metadata as md
    write("adam_mini", tensors, {"adam_mini": "adam-mini %s Adam_mini %s, partition: q/k per head, v/o/MLP per "
                                              "row, LN gains one block, biases and wte/wpe Adam; step<k>.* after step k"
                                              % (md.version("adam-mini"), json.dumps(AM))})


MODELS = {"gpt2": dict(name="gpt2", params=mf.gpt2_params, forward=mf.gpt2_forward, cfg=mf.GPT2, seed=1234),
          "llama": dict(name="llama", params=mf.llama_params, forward=mf.llama_forward, cfg=mf.LLAMA, seed=5678)}
MODEL = MODELS["gpt2"]  # the model the builders run on (main() sets it)


def base():
    """The weights and batch of make_fixtures.py's ref_<model>_tiny (same seed, same draws)."""
    g = torch.Generator().manual_seed(MODEL["seed"])
    params32 = MODEL["params"](g)
    params = {k: v.to(torch.float32).to(DT) for k, v in params32.items()}
    cfg = MODEL["cfg"]
    inputs, targets = mf.make_batch(g, cfg["V"], cfg["B"], cfg["T"])
    return params, inputs, targets


def write(name, tensors, meta):
    meta = dict(meta, model=MODEL["name"] + "_tiny", config=json.dumps(MODEL["cfg"]), seed=str(MODEL["seed"]),
                precision="computed in float64 from float32 weights, stored F32",
                generator="tests/reference/make_optim_fixtures.py", torch=torch.__version__)
    blob = mf.safetensors_bytes(tensors, meta)
    path = os.path.join(mf.FIXTURES, "ref_%s_%s_tiny.safetensors" % (MODEL["name"], name))
    with open(path, "wb") as f:
        f.write(blob)
    back = mf.read_safetensors(path)
    for k, v in tensors:
        want = v.to(torch.float32) if v.dtype.is_floating_point else v
        assert torch.equal(back[k], want), k
    print("  wrote %s (%d bytes, %d tensors)" % (os.path.relpath(path, mf.REPO), len(blob), len(back)))


def build_muon():
    params, inputs, targets = base()
    losses, steps = muon_run(params, inputs, targets)
    bf16_losses, _ = muon_run(params, inputs, targets, ns_dtype=torch.bfloat16)
    m_losses, _ = muon_run(params, inputs, targets, scale="match_adamw", muon_lr=MUON["adam_lr"])
    print("muon: loss %.6f, after 10 steps %.6f (bf16 Newton-Schulz: %.6f; match_adamw: %.6f)" %
          (losses[0].item(), losses[-1].item(), bf16_losses[-1].item(), m_losses[-1].item()))
    assert losses[-1] < losses[0] and m_losses[-1] < m_losses[0], "Muon did not reduce the loss"
    tensors = list(params.items()) + [("inputs", inputs), ("targets", targets), ("muon_losses", losses),
                                      ("muon_bf16_losses", bf16_losses), ("muonm_losses", m_losses)]
    for k, st in enumerate(steps, 1):
        tensors += [("step%d.%s" % (k, n), v) for n, v in st.items()]
    write("muon", tensors, {"muon": "MuonWithAuxAdam equations (KellerJordan/Muon), %s; Newton-Schulz in float64 "
                                    "(muon_bf16_losses: bf16 as the reference)" % json.dumps(MUON)})


SOPHIA = dict(lr=1e-3, betas=(0.965, 0.99), rho=0.04, k=2, wd=0.1, sample_seed=2135)


def sophia_run(params, inputs, targets):
    """SophiaG's equations (rho/bs form) with the GNB estimate every k steps on sampled labels."""
    p = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    m = {k: torch.zeros_like(v) for k, v in p.items()}
    h = {k: torch.zeros_like(v) for k, v in p.items()}  # the reference's hess (EMA of g_hat^2)
    b1, b2 = SOPHIA["betas"]
    lr, rho, k = SOPHIA["lr"], SOPHIA["rho"], SOPHIA["k"]
    bs = int((targets >= 0).sum().item())
    gen = torch.Generator().manual_seed(SOPHIA["sample_seed"])
    losses, steps, labels = [], [], {}
    for t in range(1, STEPS + 1):
        for v in p.values():
            v.grad = None
        loss = mf.loss_fn(MODEL['forward'](p, inputs), targets)
        loss.backward()
        losses.append(loss.item())
        with torch.no_grad():
            for n, v in p.items():
                wd = SOPHIA["wd"] if v.dim() == 2 else 0.0
                v.mul_(1 - lr * wd)
                m[n].mul_(b1).add_(v.grad, alpha=1 - b1)
                ratio = (m[n].abs() / (rho * bs * h[n] + 1e-15)).clamp(None, 1)
                v.addcmul_(m[n].sign(), ratio, value=-lr)
        steps.append({n: v.detach().clone() for n, v in p.items()})
        if t % k == 0:  # update_hessian after this step, on labels sampled from the model
            for v in p.values():
                v.grad = None
            logits = MODEL['forward'](p, inputs)
            probs = torch.softmax(logits.detach().reshape(-1, logits.shape[-1]), dim=-1)
            y = torch.multinomial(probs, 1, generator=gen).reshape(targets.shape).to(torch.int32)
            y = torch.where(targets >= 0, y, torch.full_like(y, -1))
            labels[t] = y
            mf.loss_fn(logits, y).backward()
            with torch.no_grad():
                for n, v in p.items():
                    h[n].mul_(b2).addcmul_(v.grad, v.grad, value=1 - b2)
    return torch.tensor(losses, dtype=DT), steps, labels, {n: bs * v for n, v in h.items()}


def build_sophia():
    params, inputs, targets = base()
    losses, steps, labels, h = sophia_run(params, inputs, targets)
    print("sophia: loss %.6f, after 10 steps %.6f" % (losses[0].item(), losses[-1].item()))
    assert losses[-1] < losses[0], "Sophia did not reduce the loss"
    tensors = list(params.items()) + [("inputs", inputs), ("targets", targets), ("sophia_losses", losses)]
    tensors += [("gnb_labels%d" % t, y) for t, y in sorted(labels.items())]
    for k, st in enumerate(steps, 1):
        tensors += [("step%d.%s" % (k, n), v) for n, v in st.items()]
    tensors += [("h10.%s" % n, v) for n, v in h.items()]
    write("sophia", tensors, {"sophia": "SophiaG equations (Liuhong99/Sophia sophia.py, rho/bs form) %s; GNB every k "
                                        "steps after the step on sampled labels gnb_labels<t>; h10.* = bs * hess"
                                        % json.dumps(SOPHIA)})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", metavar="NAMES",
                    help="comma-separated model_optimizer: gpt2_muon, gpt2_schedulefree, gpt2_adam_mini, "
                         "llama_muon, llama_adam_mini, gpt2_sophia (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    builds = {"gpt2_muon": build_muon, "gpt2_schedulefree": build_sf, "gpt2_adam_mini": build_am,
              "llama_muon": build_muon, "llama_adam_mini": build_am, "gpt2_sophia": build_sophia}
    global MODEL
    for name in (args.only.split(",") if args.only else list(builds)):
        MODEL = MODELS[name.split("_")[0]]
        builds[name]()


if __name__ == "__main__":
    main()
