"""PyTorch reference for zaya.cpp's optimizers (src/train): writes tests/data/optim/{adamw,muon}.safetensors.

AdamW is torch.optim.AdamW itself. Muon is written here from its published description (Moonlight's
formulation, see src/train/muon.h): momentum buffer buf = mu*buf + g, Nesterov update g + mu*buf,
quintic Newton-Schulz on the Frobenius-normalised update (transposed when rows > cols), rescaled by
0.2*sqrt(max(rows, cols)), decoupled weight decay. Everything in fp32; 3-D tensors are batches of
independent matrices (expert tensors).

Each case <c> stores: <c>.p0 (initial value), <c>.g1..g3 (gradients of steps 1..3), <c>.p1 (value after
step 1), <c>.p3 (after step 3) and the state after step 3 (<c>.exp_avg/.exp_avg_sq or <c>.momentum).
Hyper-parameters are fixed below and repeated in tests/optim_test.cpp.

Run: /usr/bin/python3 tools/reference/optim_ref.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "optim")

ADAMW = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
MUON = dict(lr=2e-2, weight_decay=0.1, momentum=0.95, ns_steps=5, abc=(3.4445, -4.7750, 2.0315), rms_scale=0.2)


def newton_schulz(g, steps, abc):
    a, b, c = abc
    x = g / (g.norm() + 1e-7)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.t()
    for _ in range(steps):
        gram = x @ x.t()
        poly = b * gram + c * (gram @ gram)
        x = a * x + poly @ x
    return x.t() if tall else x


def muon_step(p, g, buf, nesterov, cfg):
    """One Muon step on p [..., rows, cols] (leading dims: independent matrices), in place."""
    mu = cfg["momentum"]
    buf.mul_(mu).add_(g)
    u = g + mu * buf if nesterov else buf.clone()
    rows, cols = p.shape[-2], p.shape[-1]
    scale = cfg["rms_scale"] * max(rows, cols) ** 0.5
    flat_p, flat_u = p.view(-1, rows, cols), u.reshape(-1, rows, cols)
    for i in range(flat_p.shape[0]):
        o = newton_schulz(flat_u[i], cfg["ns_steps"], cfg["abc"])
        flat_p[i].mul_(1 - cfg["lr"] * cfg["weight_decay"])
        flat_p[i].add_(o, alpha=-cfg["lr"] * scale)


def adamw_cases(gen):
    out = {}
    for name, shape in [("mat", (7, 5)), ("vec", (13,))]:
        p0 = (torch.randn(shape, generator=gen) * 0.1).float()
        grads = [torch.randn(shape, generator=gen).float() for _ in range(3)]
        p = torch.nn.Parameter(p0.clone())
        opt = torch.optim.AdamW([p], **ADAMW)
        out[f"{name}.p0"] = p0
        for k, g in enumerate(grads, 1):
            p.grad = g.clone()
            opt.step()
            out[f"{name}.g{k}"] = g
            if k in (1, 3):
                out[f"{name}.p{k}"] = p.detach().clone()
        state = opt.state[p]
        out[f"{name}.exp_avg"] = state["exp_avg"].clone()
        out[f"{name}.exp_avg_sq"] = state["exp_avg_sq"].clone()
    return out


def muon_cases(gen):
    out = {}
    for name, shape, nesterov in [("wide", (6, 10), True), ("tall", (10, 6), True), ("expert", (3, 8, 5), True),
                                  ("plain", (6, 10), False)]:
        p0 = (torch.randn(shape, generator=gen) * 0.1).float()
        grads = [torch.randn(shape, generator=gen).float() for _ in range(3)]
        p = p0.clone()
        buf = torch.zeros_like(p)
        out[f"{name}.p0"] = p0
        for k, g in enumerate(grads, 1):
            muon_step(p, g, buf, nesterov, MUON)
            out[f"{name}.g{k}"] = g
            if k in (1, 3):
                out[f"{name}.p{k}"] = p.clone()
        out[f"{name}.momentum"] = buf.clone()
    return out


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    os.makedirs(OUT, exist_ok=True)
    st.save(adamw_cases(gen), os.path.join(OUT, "adamw.safetensors"), {"generator": "tools/reference/optim_ref.py"})
    st.save(muon_cases(gen), os.path.join(OUT, "muon.safetensors"), {"generator": "tools/reference/optim_ref.py"})
    print("wrote", os.path.normpath(OUT))


if __name__ == "__main__":
    main()
