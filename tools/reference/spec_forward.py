"""A second, independent forward pass written literally from the spec formulas (sections 5.1-5.9), in float64
numpy with explicit loops over time for the convolutions, delayed values and attention.

It shares nothing with zaya_ref.py except the config/tensor loading, so check_golden.py uses it to cross-check
features the Hugging Face golden case does not exercise (sliding windows, biases, left padding, MHA, partial
rotary factors, kernel sizes, legacy semantics). Slow on purpose; only for tiny cases.
"""

import math

import numpy as np


def rms_norm(x, g, eps):
    """x [..., D] -> g * x / sqrt(mean(x^2) + eps)."""
    return g * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def gelu(x):
    return x * 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def linear(x, W, b=None):
    y = x @ W.T
    return y if b is None else y + b


def cca_block(cfg, w, p, h, mask_row, layer_type):
    """One sequence: h [S,H] normed block input -> attention output a [S,H] (spec 5.5, fresh sequence)."""
    S = h.shape[0]
    d, Hq, Hk = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    G, A, C = Hq // Hk, Hq * d, (Hq + Hk) * d
    t0, t1 = cfg.cca_time0, cfg.cca_time1
    P = (t0 - 1) + (t1 - 1)
    if mask_row is not None:
        h = h * mask_row[:, None]  # padded rows zeroed before (a) and (f)
    pre = p + "self_attn.qkv_proj."

    def bias(name):
        return w.get(pre + name + ".bias")

    Q0 = linear(h, w[pre + "q_proj.weight"], bias("q_proj"))  # [S, A]
    K0 = linear(h, w[pre + "k_proj.weight"], bias("k_proj"))  # [S, Kv]
    U = np.concatenate([Q0, K0], axis=1)  # [S, C]
    # raw frames u_tau, tau = -P .. S-1 (zeros before the sequence)
    u = {tau: (U[tau] if tau >= 0 else np.zeros(C)) for tau in range(-P, S)}
    w0, b0 = w[pre + "conv_qk_depthwise.weight"], w[pre + "conv_qk_depthwise.bias"]  # [C,1,t0], [C]
    W1, b1 = w[pre + "conv_qk_grouped.weight"], w[pre + "conv_qk_grouped.bias"]  # [C,d,t1], [C]
    m = {}
    for sigma in range(-(t1 - 1), S):
        m[sigma] = b0 + sum(w0[:, 0, j] * u[sigma - t0 + 1 + j] for j in range(t0))
    Cc = np.zeros((S, C))
    for t in range(S):
        for o in range(C):
            g = o // d
            acc = b1[o]
            for j in range(t1):
                acc += W1[o, :, j] @ m[t - t1 + 1 + j][g * d:(g + 1) * d]
            Cc[t, o] = acc
    Q0h = Q0.reshape(S, Hq, d)
    K0h = K0.reshape(S, Hk, d)
    Qr = np.stack([0.5 * (Q0h[:, hh] + K0h[:, hh // G]) for hh in range(Hq)], axis=1)
    Kr = np.stack([np.mean([Qr[:, hh] for hh in range(Hq) if hh // G == j], axis=0) for j in range(Hk)], axis=1)
    Qt = Cc[:, :A].reshape(S, Hq, d) + Qr
    Kt = Cc[:, A:].reshape(S, Hk, d) + Kr
    eps = 1.1920928955078125e-07
    tau_k = w[p + "self_attn.qk_norm.temp"]
    Qn = math.sqrt(d) * Qt / np.maximum(np.linalg.norm(Qt, axis=-1, keepdims=True), eps)
    Kn = tau_k[None, :, None] * math.sqrt(d) * Kt / np.maximum(np.linalg.norm(Kt, axis=-1, keepdims=True), eps)
    rope = cfg.rope_parameters[layer_type]
    r = int(d * float(rope.get("partial_rotary_factor", 1.0)))
    theta = float(rope["rope_theta"])

    def rotate(x, pos):
        x = x.copy()
        for i in range(r // 2):
            phi = pos * theta ** (-2.0 * i / r)
            a, b = x[..., i].copy(), x[..., i + r // 2].copy()
            x[..., i] = a * math.cos(phi) - b * math.sin(phi)
            x[..., i + r // 2] = b * math.cos(phi) + a * math.sin(phi)
        return x

    Qp = np.stack([rotate(Qn[t], t) for t in range(S)])
    Kp = np.stack([rotate(Kn[t], t) for t in range(S)])
    Vc = linear(h, w[pre + "v_proj_current.weight"], bias("v_proj_current"))
    Dv = linear(h, w[pre + "v_proj_delayed.weight"], bias("v_proj_delayed"))
    seed = bias("v_proj_delayed") if bias("v_proj_delayed") is not None else np.zeros(Dv.shape[1])
    Vd = np.stack([seed if t == 0 else Dv[t - 1] for t in range(S)])
    V = np.concatenate([Vc, Vd], axis=1).reshape(S, Hk, d)
    W = cfg.sliding_window if layer_type == "hybrid_sliding" else None
    O = np.zeros((S, Hq, d))
    for t in range(S):
        keys = [tp for tp in range(t + 1) if (W is None or t - tp < W) and (mask_row is None or mask_row[tp] > 0)]
        if not keys:
            continue  # a padded query sees no key: zero output (see zaya_ref.py)
        for hh in range(Hq):
            j = hh // G
            s = np.array([Qp[t, hh] @ Kp[tp, j] / math.sqrt(d) for tp in keys])
            pi = softmax(s)
            O[t, hh] = sum(pi[n] * V[tp, j] for n, tp in enumerate(keys))
    return linear(O.reshape(S, A), w[p + "self_attn.o_proj.weight"], w.get(p + "self_attn.o_proj.bias"))


def forward(cfg, tensors, ids, mask=None, skip_passthrough=False, router_norm_eps=None):
    """ids [B,S] ints, mask [B,S] or None. Returns (logits [B,S,V], choices [L,B,S] with E = skip), float64."""
    w = {k: v.detach().double().numpy() for k, v in tensors.items()}
    B, S = ids.shape
    L, E = cfg.num_hidden_layers, cfg.num_experts
    eps = cfg.rms_norm_eps
    r_eps = eps if router_norm_eps is None else router_norm_eps
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    logits = np.zeros((B, S, cfg.vocab_size))
    choices = np.zeros((L, B, S), dtype=np.int64)
    use_mask = mask is not None and S > 1 and not bool((mask > 0).all())
    for b in range(B):
        mask_row = mask[b].astype(np.float64) if mask is not None else None
        e = w["model.embed_tokens.weight"][ids[b]]
        x = (e + w["model.input_hidden_states_bias"]) * w["model.input_hidden_states_scale"]
        rho_prev = None
        for i in range(L):
            p = f"model.layers.{i}."
            h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
            # a mask with zeros (multi-token call) zeroes padded inputs and removes padded keys
            a = cca_block(cfg, w, p, h, mask_row if use_mask else None, cfg.layer_types[i])

            def res(mod, o, r):
                q = p + mod + "."
                return (o + w[q + "hidden_states_bias"]) * w[q + "hidden_states_scale"] + \
                       (r + w[q + "residual_bias"]) * w[q + "residual_scale"]

            y = res("post_attention_residual_scale", a, x)
            u = rms_norm(y, w[p + "post_attention_layernorm.weight"], eps)
            g = p + "mlp.gate."
            rho = linear(u, w[g + "down_proj.weight"], w[g + "down_proj.bias"])
            if i >= 1:
                rho = rho + w[g + "router_states_scale"] * rho_prev
            rho_prev = rho
            n = rms_norm(rho, w[g + "router_mlp.norm.weight"], r_eps)
            z1 = gelu(linear(n, w[g + "router_mlp.fc1.weight"], w[g + "router_mlp.fc1.bias"]))
            z2 = gelu(linear(z1, w[g + "router_mlp.fc2.weight"], w[g + "router_mlp.fc2.bias"]))
            probs = softmax(linear(z2, w[g + "router_mlp.out_proj.weight"]))
            k_star = np.argmax(probs + w[g + "balancing_biases"], axis=-1)
            choices[i, b] = k_star
            m = np.zeros_like(u)
            I = cfg.moe_intermediate_size
            for t in range(S):
                e_t = int(k_star[t])
                if e_t == E:
                    if skip_passthrough:
                        m[t] = probs[t, E] * u[t]
                    continue
                ab = w[p + "mlp.experts.gate_up_proj"][e_t] @ u[t]
                m[t] = probs[t, e_t] * (w[p + "mlp.experts.down_proj"][e_t] @ (silu(ab[:I]) * ab[I:]))
            x = res("post_mlp_residual_scale", m, y)
        z = rms_norm(x, w["model.norm.weight"], eps)
        logits[b] = z @ head.T + (w["lm_head.bias"] if "lm_head.bias" in w else 0.0)
    return logits, choices

