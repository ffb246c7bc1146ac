"""ZAYA1 in plain PyTorch: the project's readable reference model.

Written from /work/shared/spec/zaya1-architecture.md (sections 3-8, 12) with the semantics of the upstream
Hugging Face `modeling_zaya.py` (the "reference semantics" of the spec). Parameter names equal the native
checkpoint names, so `model.state_dict()` is a native checkpoint and autograd gradients come out under the
same names.

What is here, top to bottom:
  ZayaConfig            native fields + defaults + validation; legacy configs (ZAYA1-base list style and
                        ZAYA1-8B-legacy scalar style) are converted to native fields (spec section 8)
  legacy names          legacy <-> native tensor-name mapping (spec 8.3)
  modules               RMSNorm, CCA attention, router with EDA, experts, decoder block, model
  ZayaCache             cached generation state: K/V, conv frames, delayed value, sliding trimming (spec 7)
  load_pretrained       HF-format directory (config.json + model.safetensors or a sharded index)
  init_weights          the Hugging Face initialisation (spec 9.2)
  greedy_generate       prefill then one token at a time through the cache

Semantics switches (Semantics): `skip_passthrough` (legacy MoD skip = p_E * u instead of zero) and
`router_norm_eps` (legacy ZAYA1-base router-norm epsilon 1e-6). Compute dtype: float32 (default), float64, or
bfloat16 with the reference's fp32 op set (fp32 residual stream, fp32 norm statistics, fp32 attention and
router-bias softmax inputs, fp32 balancing biases).

Fully masked attention rows (left-padding query positions, which see no key) output zero. That is what
PyTorch's SDPA does for rows without any allowed key; the reference leaves those positions unspecified
(spec 5.5g) and they never influence real positions (padded inputs are zeroed before the projections).
"""

import json
import math
import os
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

import st

LAYER_TYPES = ("hybrid", "hybrid_sliding")
DEFAULT_ROPE = {
    "hybrid": {"rope_type": "default", "rope_theta": 5_000_000.0, "partial_rotary_factor": 0.5},
    "hybrid_sliding": {"rope_type": "default", "rope_theta": 10_000.0, "partial_rotary_factor": 0.5},
}


class ConfigError(ValueError):
    pass


# ----------------------------------------------------------------------------------------------------------------
# Configuration


class ZayaConfig:
    """Native ZayaConfig fields (spec section 3). `legacy_style` is None for native configs, or "8b" / "base"
    when the config was converted from a legacy file; the legacy semantics switches depend on it."""

    DEFAULTS = dict(
        vocab_size=262272,
        hidden_size=2048,
        num_hidden_layers=40,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=128,
        moe_intermediate_size=2048,
        num_experts=16,
        num_experts_per_tok=1,
        router_hidden_size=256,
        rms_norm_eps=1e-5,
        hidden_act="silu",
        cca_time0=2,
        cca_time1=2,
        layer_types=None,
        rope_parameters=None,
        sliding_window=None,
        attention_bias=False,
        lm_head_bias=False,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=106,
        max_position_embeddings=131072,
        initializer_range=0.02,
        attention_dropout=0.0,
    )

    def __init__(self, **fields):
        for key, value in self.DEFAULTS.items():
            setattr(self, key, fields.get(key, value))
        self.legacy_style = fields.get("legacy_style")
        self.allow_unofficial_topk = bool(fields.get("allow_unofficial_topk", False))
        if self.layer_types is None:
            self.layer_types = ["hybrid"] * int(self.num_hidden_layers)
        self.layer_types = list(self.layer_types)
        rope = fields.get("rope_parameters")
        if rope is None:
            rope = json.loads(json.dumps(DEFAULT_ROPE))
        elif isinstance(rope, dict):
            # the ZAYA1-8B hub file carries a stray top-level rope_type: ignored like the reference does
            rope = {k: dict(v) for k, v in rope.items() if isinstance(v, dict)}
        self.rope_parameters = rope
        self.validate()

    # Derived geometry (spec 1)
    @property
    def q_width(self):  # A
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self):  # Kv
        return self.num_key_value_heads * self.head_dim

    @property
    def conv_channels(self):  # C
        return self.q_width + self.kv_width

    @property
    def conv_state_len(self):  # P
        return (self.cca_time0 - 1) + (self.cca_time1 - 1)

    @property
    def groups(self):  # G
        return self.num_attention_heads // self.num_key_value_heads

    def rope_theta(self, layer_type):
        return float(self.rope_parameters[layer_type]["rope_theta"])

    def rotary_dim(self, layer_type):
        # a per-type dict without partial_rotary_factor means f = 1.0 in the reference
        f = float(self.rope_parameters[layer_type].get("partial_rotary_factor", 1.0))
        return int(self.head_dim * f)

    def validate(self):
        def need(cond, msg):
            if not cond:
                raise ConfigError(msg)

        for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                    "head_dim", "moe_intermediate_size", "num_experts", "num_experts_per_tok", "router_hidden_size",
                    "cca_time0", "cca_time1"):
            value = getattr(self, key)
            need(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                 f"config field {key}: expected a positive integer, got {value!r}")
        need(isinstance(self.rms_norm_eps, (int, float)) and self.rms_norm_eps > 0,
             f"config field rms_norm_eps: expected a positive number, got {self.rms_norm_eps!r}")
        need(self.hidden_act == "silu", f"config field hidden_act: only 'silu' is supported, got {self.hidden_act!r}")
        need(self.num_experts_per_tok == 1 or self.allow_unofficial_topk,
             f"config field num_experts_per_tok: the reference supports 1 only, got {self.num_experts_per_tok}")
        need(self.num_experts_per_tok <= self.num_experts + 1,
             "config field num_experts_per_tok: larger than the number of router classes")
        need(self.num_attention_heads % self.num_key_value_heads == 0,
             f"config: num_attention_heads ({self.num_attention_heads}) must be a multiple of "
             f"num_key_value_heads ({self.num_key_value_heads})")
        need(self.kv_width % 2 == 0, f"config: num_key_value_heads*head_dim ({self.kv_width}) must be even "
                                     "(values are split into current/delayed halves)")
        need(self.conv_state_len >= 1, "config: cca_time0 = cca_time1 = 1 is not supported (needs P >= 1)")
        need(isinstance(self.layer_types, list) and len(self.layer_types) == self.num_hidden_layers,
             f"config field layer_types: expected a list of {self.num_hidden_layers} entries")
        for i, t in enumerate(self.layer_types):
            need(t in LAYER_TYPES, f"config field layer_types[{i}]: expected one of {LAYER_TYPES}, got {t!r}")
        if "hybrid_sliding" in self.layer_types:
            need(isinstance(self.sliding_window, int) and not isinstance(self.sliding_window, bool)
                 and self.sliding_window >= 1,
                 f"config field sliding_window: must be a positive integer when layer_types contains "
                 f"hybrid_sliding, got {self.sliding_window!r}")
        need(isinstance(self.rope_parameters, dict), "config field rope_parameters: expected an object")
        for t in set(self.layer_types):
            need(t in self.rope_parameters, f"config field rope_parameters: missing entry for layer type {t!r}")
            p = self.rope_parameters[t]
            need(p.get("rope_type", "default") == "default",
                 f"config field rope_parameters.{t}.rope_type: only 'default' is supported, got {p.get('rope_type')!r}")
            need(isinstance(p.get("rope_theta"), (int, float)) and p["rope_theta"] > 0,
                 f"config field rope_parameters.{t}.rope_theta: expected a positive number")
            r = self.rotary_dim(t)
            need(0 <= r <= self.head_dim and r % 2 == 0,
                 f"config field rope_parameters.{t}.partial_rotary_factor: rotary dim {r} must be even and <= head_dim")
        need(self.pad_token_id is None or 0 <= self.pad_token_id < self.vocab_size,
             f"config field pad_token_id: {self.pad_token_id} outside the vocabulary")

    def to_dict(self):
        """Native config.json content (HF field names)."""
        d = {"architectures": ["ZayaForCausalLM"], "model_type": "zaya"}
        for key in self.DEFAULTS:
            d[key] = getattr(self, key)
        if self.num_experts_per_tok != 1:
            d["unofficial_topk"] = True
        return d

    @classmethod
    def from_dict(cls, d, allow_unofficial_topk=False):
        """Native or legacy config dict -> ZayaConfig (legacy files are converted per spec 8.3)."""
        if not isinstance(d, dict):
            raise ConfigError("config: expected a JSON object")
        style = legacy_style_of(d)
        if style is not None:
            return cls(**convert_legacy_config(d, style), legacy_style=style,
                       allow_unofficial_topk=allow_unofficial_topk)
        fields = {k: d[k] for k in cls.DEFAULTS if k in d}
        if d.get("unofficial_topk"):
            allow_unofficial_topk = True
        return cls(**fields, allow_unofficial_topk=allow_unofficial_topk)

    @classmethod
    def from_file(cls, path):
        try:
            with open(path) as f:
                d = json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON: {e}")
        try:
            return cls.from_dict(d)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}")


def legacy_style_of(d):
    """None for a native config; "base" for the ZAYA1-base list style; "8b" for the ZAYA1-8B-legacy scalar style."""
    if "zaya_layers" in d:
        return "base"
    legacy_keys = ("ffn_hidden_size", "zaya_mlp_expansion", "num_query_groups", "norm_epsilon", "moe_router_topk")
    if "moe_intermediate_size" not in d and any(k in d for k in legacy_keys):
        return "8b"
    return None


def _int_field(d, key, default=None):
    v = d.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool):
        raise ConfigError(f"legacy config field {key}: expected an integer, got {v!r}")
    return v


def convert_legacy_config(d, style):
    """Legacy config dict -> native field dict (spec 8.2/8.3)."""
    for key in ("zaya_use_mod", "zaya_use_eda", "scale_residual_merge"):
        if d.get(key, True) is not True:
            raise ConfigError(f"legacy config field {key}: the native model requires true, got {d.get(key)!r}")
    if d.get("clamp_temp", False):
        raise ConfigError("legacy config field clamp_temp: exp-clamped temperatures are not supported")
    hidden = _int_field(d, "hidden_size", 2048)
    out = {}
    if style == "base":
        layers = d["zaya_layers"]
        if not isinstance(layers, list) or len(layers) == 0 or len(layers) % 2:
            raise ConfigError("legacy config field zaya_layers: expected an even-length list ['a', E, 'a', E, ...]")
        L = len(layers) // 2
        for i, entry in enumerate(layers):
            ok = entry == "a" if i % 2 == 0 else (isinstance(entry, int) and entry >= 1)
            if not ok:
                raise ConfigError(f"legacy config field zaya_layers[{i}]: expected "
                                  f"{'a' if i % 2 == 0 else 'an expert count'}, got {entry!r}")
        experts = set(layers[1::2])
        if len(experts) != 1:
            raise ConfigError("legacy config field zaya_layers: every MoE half-layer must have the same expert count")

        def per_block(key, odd):
            values = d.get(key)
            if not isinstance(values, list) or len(values) != 2 * L:
                raise ConfigError(f"legacy config field {key}: expected a list of {2 * L} entries")
            picked = values[1::2] if odd else values[0::2]
            if len(set(picked)) != 1 or not isinstance(picked[0], int) or picked[0] < 1:
                raise ConfigError(f"legacy config field {key}: expected one positive value on every "
                                  f"{'MoE' if odd else 'attention'} half-layer, got {sorted(set(map(str, picked)))}")
            return picked[0]

        q_heads = per_block("cca_num_q_heads", odd=False)
        kv_heads = per_block("num_query_groups_list", odd=False)
        ffn = per_block("ffn_hidden_size_list", odd=True)
        router = per_block("zaya_mlp_expansion", odd=True)
        uncompressed = _int_field(d, "num_attention_heads", 16)
        # the ZAYA1-base code reshapes queries into num_attention_heads/2 heads (the compressed count)
        if uncompressed != 2 * q_heads:
            raise ConfigError(f"legacy config: num_attention_heads ({uncompressed}) must be twice cca_num_q_heads "
                              f"({q_heads}) in the ZAYA1-base layout")
        head_dim = d.get("head_dim") or hidden // uncompressed
        out.update(num_hidden_layers=L, num_experts=experts.pop(), num_attention_heads=q_heads)
        if _int_field(d, "num_key_value_heads", kv_heads) != kv_heads:
            raise ConfigError("legacy config: num_key_value_heads differs from num_query_groups_list")
        rope_theta = d.get("rope_theta", 10000.0)
    else:
        halves = _int_field(d, "num_hidden_layers", 80)
        if halves % 2:
            raise ConfigError(f"legacy config field num_hidden_layers: {halves} half-layers is not even")
        L = halves // 2
        q_heads = _int_field(d, "num_attention_heads", 8)
        kv_heads = _int_field(d, "num_key_value_heads", 2)
        if "num_query_groups" in d and d["num_query_groups"] != kv_heads:
            raise ConfigError("legacy config: num_query_groups differs from num_key_value_heads")
        head_dim = d.get("head_dim") or d.get("kv_channels") or hidden // q_heads
        ffn = _int_field(d, "ffn_hidden_size", 4096)
        router = _int_field(d, "zaya_mlp_expansion", 256)
        out.update(num_hidden_layers=L, num_experts=_int_field(d, "num_experts", 16), num_attention_heads=q_heads)
        rope_theta = d.get("rope_theta", 10000.0)
    if ffn % 2:
        raise ConfigError(f"legacy config: ffn hidden size {ffn} is not even (fused gate+up)")
    swa = d.get("swa_layers") or []
    if swa:
        if len(swa) == 2 * L:
            swa = swa[::2]
        if len(swa) != L:
            raise ConfigError(f"legacy config field swa_layers: expected {2 * L} or {L} entries")
        layer_types = ["hybrid" if int(w) == 0 else "hybrid_sliding" for w in swa]
        windows = [int(w) for w in swa if int(w) > 0]
        sliding = max(windows) + 1 if windows else None  # legacy counts previous tokens; native W includes itself
    else:
        layer_types = ["hybrid"] * L
        sliding = None
    f = d.get("partial_rotary_factor", 0.5)
    out.update(
        vocab_size=_int_field(d, "vocab_size", 262272),
        hidden_size=hidden,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        moe_intermediate_size=ffn // 2,
        num_experts_per_tok=_int_field(d, "moe_router_topk", 1),
        router_hidden_size=router,
        rms_norm_eps=d.get("norm_epsilon", 1e-5),
        cca_time0=d.get("cca_time0", 2),
        cca_time1=d.get("cca_time1", 2),
        layer_types=layer_types,
        sliding_window=sliding,
        rope_parameters={
            "hybrid": {"rope_type": "default", "rope_theta": float(rope_theta), "partial_rotary_factor": f},
            "hybrid_sliding": {"rope_type": "default", "rope_theta": float(d.get("swa_rotary_base", 10000.0)),
                               "partial_rotary_factor": f},
        },
        attention_bias=bool(d.get("attention_bias", False)),
        lm_head_bias=bool(d.get("lm_head_bias", False)),
        tie_word_embeddings=bool(d.get("tie_word_embeddings", True)),
        pad_token_id=d.get("pad_token_id", 0),
        bos_token_id=d.get("bos_token_id", 2),
        eos_token_id=d.get("eos_token_id", 1),
        max_position_embeddings=d.get("max_position_embeddings", 4096),
    )
    return out


class Semantics:
    """Runtime switches. Native (reference) semantics by default; `for_config(cfg, legacy=True)` gives the
    semantics of the legacy code a legacy config came from (spec 8.4)."""

    def __init__(self, skip_passthrough=False, router_norm_eps=None):
        self.skip_passthrough = skip_passthrough
        self.router_norm_eps = router_norm_eps  # None: use rms_norm_eps

    @classmethod
    def for_config(cls, cfg, legacy=False):
        if not legacy:
            return cls()
        # ZAYA1-base code reads a never-set key and falls back to 1e-6; the 8B-legacy code uses norm_epsilon
        return cls(skip_passthrough=True, router_norm_eps=1e-6 if cfg.legacy_style == "base" else None)

    def describe(self):
        return {"skip_passthrough": self.skip_passthrough, "router_norm_eps": self.router_norm_eps}


# ----------------------------------------------------------------------------------------------------------------
# Legacy tensor names (spec 8.3). Legacy half-layer 2i = attention of block i, 2i+1 = MoE of block i.

_NATIVE_ATTN = {
    "self_attn.qkv.linear_q.": "self_attn.qkv_proj.q_proj.",
    "self_attn.qkv.linear_k.": "self_attn.qkv_proj.k_proj.",
    "self_attn.qkv.val_proj1.": "self_attn.qkv_proj.v_proj_current.",
    "self_attn.qkv.val_proj2.": "self_attn.qkv_proj.v_proj_delayed.",
    "self_attn.qkv.conv_qk.0.": "self_attn.qkv_proj.conv_qk_depthwise.",
    "self_attn.qkv.conv_qk.1.": "self_attn.qkv_proj.conv_qk_grouped.",
    "self_attn.qkv.temp": "self_attn.qk_norm.temp",
    "self_attn.o_proj.": "self_attn.o_proj.",
    "input_norm.weight": "input_layernorm.weight",
}
_NATIVE_MOE = {
    "input_norm.weight": "post_attention_layernorm.weight",
    "zaya_block.router.down_proj.": "mlp.gate.down_proj.",
    "zaya_block.router.router_states_scale": "mlp.gate.router_states_scale",
    "zaya_block.router.rmsnorm_eda.weight": "mlp.gate.router_mlp.norm.weight",
    "zaya_block.router.router_mlp.0.": "mlp.gate.router_mlp.fc1.",
    "zaya_block.router.router_mlp.2.": "mlp.gate.router_mlp.fc2.",
    "zaya_block.router.router_mlp.4.": "mlp.gate.router_mlp.out_proj.",
    "zaya_block.router.balancing_biases": "mlp.gate.balancing_biases",
    "res_scale.": "post_attention_residual_scale.",
}
_LEGACY_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_LEGACY_EXPERT = re.compile(r"^zaya_block\.experts\.local_experts\.(\d+)\.linear_fc([12])\.weight$")


def _replace_prefix(rest, table):
    for old, new in table.items():
        if rest == old or rest.startswith(old):
            return new + rest[len(old):]
    return None


def legacy_to_native(tensors, num_blocks):
    """Legacy name -> tensor dict to native names; per-expert tensors are stacked. Raises on unknown names."""
    L = num_blocks
    out = {}
    experts = {}  # (block, 'gate_up_proj'|'down_proj') -> {e: tensor}
    for name, t in tensors.items():
        if name == "model.embed_tokens.weight" or name.startswith("lm_head."):
            out[name] = t
            continue
        if name == "model.final_norm.weight":
            out["model.norm.weight"] = t
            continue
        if name.startswith("model.res_scale."):
            out[f"model.layers.{L - 1}.post_mlp_residual_scale." + name[len("model.res_scale."):]] = t
            continue
        m = _LEGACY_LAYER.match(name)
        if m is None:
            raise ConfigError(f"unknown legacy tensor name {name!r}")
        half, rest = int(m.group(1)), m.group(2)
        if half >= 2 * L:
            raise ConfigError(f"legacy tensor {name!r}: half-layer {half} >= {2 * L}")
        block = half // 2
        if half % 2 == 0:
            if rest.startswith("res_scale."):
                field = rest[len("res_scale."):]
                if half == 0:
                    if field not in ("hidden_states_scale", "hidden_states_bias"):
                        raise ConfigError(f"legacy tensor {name!r}: half-layer 0 has only the hidden_states pair")
                    out["model.input_" + field] = t
                else:
                    out[f"model.layers.{block - 1}.post_mlp_residual_scale.{field}"] = t
                continue
            mapped = _replace_prefix(rest, _NATIVE_ATTN)
        else:
            em = _LEGACY_EXPERT.match(rest)
            if em is not None:
                kind = "gate_up_proj" if em.group(2) == "1" else "down_proj"
                experts.setdefault((block, kind), {})[int(em.group(1))] = t
                continue
            mapped = _replace_prefix(rest, _NATIVE_MOE)
        if mapped is None:
            raise ConfigError(f"unknown legacy tensor name {name!r}")
        out[f"model.layers.{block}.{mapped}"] = t
    for (block, kind), per_expert in experts.items():
        n = len(per_expert)
        if sorted(per_expert) != list(range(n)):
            raise ConfigError(f"legacy experts of half-layer {2 * block + 1}: indices {sorted(per_expert)} not 0..{n - 1}")
        out[f"model.layers.{block}.mlp.experts.{kind}"] = torch.stack([per_expert[e] for e in range(n)], 0)
    return out


def native_to_legacy(tensors, num_blocks):
    """Inverse of legacy_to_native (used to write legacy test checkpoints)."""
    L = num_blocks
    attn_inv = {v: k for k, v in _NATIVE_ATTN.items()}
    moe_inv = {v: k for k, v in _NATIVE_MOE.items()}
    out = {}
    for name, t in tensors.items():
        if name == "model.embed_tokens.weight" or name.startswith("lm_head."):
            out[name] = t
        elif name == "model.norm.weight":
            out["model.final_norm.weight"] = t
        elif name.startswith("model.input_hidden_states_"):
            out["model.layers.0.res_scale." + name[len("model.input_"):]] = t
        else:
            m = re.match(r"^model\.layers\.(\d+)\.(.+)$", name)
            if m is None:
                raise ConfigError(f"unknown native tensor name {name!r}")
            i, rest = int(m.group(1)), m.group(2)
            if rest.startswith("post_mlp_residual_scale."):
                field = rest[len("post_mlp_residual_scale."):]
                out[(f"model.layers.{2 * i + 2}.res_scale." if i < L - 1 else "model.res_scale.") + field] = t
            elif rest.startswith("mlp.experts."):
                kind = rest[len("mlp.experts."):]
                fc = {"gate_up_proj": 1, "down_proj": 2}[kind]
                for e in range(t.shape[0]):
                    out[f"model.layers.{2 * i + 1}.zaya_block.experts.local_experts.{e}.linear_fc{fc}.weight"] = \
                        t[e].clone()
            elif _replace_prefix(rest, moe_inv) is not None:
                out[f"model.layers.{2 * i + 1}." + _replace_prefix(rest, moe_inv)] = t
            elif _replace_prefix(rest, attn_inv) is not None:
                out[f"model.layers.{2 * i}." + _replace_prefix(rest, attn_inv)] = t
            else:
                raise ConfigError(f"unknown native tensor name {name!r}")
    return out


# ----------------------------------------------------------------------------------------------------------------
# Building blocks


def rms_norm(x, weight, eps):
    """y = g * x * (mean(x^2) + eps)^-1/2 over the last dim; statistics in fp32, result in weight's dtype
    (the reference rounds the input to the weight dtype first, then the normalised value)."""
    x = x.to(weight.dtype)
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(weight.dtype)


class RMSNorm(nn.Module):
    def __init__(self, width, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x, eps=None):
        return rms_norm(x, self.weight, self.eps if eps is None else eps)


class ResidualScaling(nn.Module):
    """out = (o + hb) * hs + (r + rb) * rs; the residual branch promotes to fp32 (r is the fp32 stream)."""

    def __init__(self, width):
        super().__init__()
        self.hidden_states_scale = nn.Parameter(torch.ones(width))
        self.hidden_states_bias = nn.Parameter(torch.zeros(width))
        self.residual_scale = nn.Parameter(torch.ones(width))
        self.residual_bias = nn.Parameter(torch.zeros(width))

    def forward(self, o, r):
        return (o + self.hidden_states_bias) * self.hidden_states_scale + (r + self.residual_bias) * self.residual_scale


def rope_cos_sin(positions, rotary_dim, theta, dtype):
    """positions [B or 1, S] (int) -> cos, sin [B or 1, S, rotary_dim] in fp32 then cast to dtype (NeoX layout:
    the angle of pair (i, i+r/2) repeats in both halves)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))
    angles = positions.float()[..., None] * inv_freq  # [.., S, r/2]
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x, cos, sin):
    """x [B, heads, S, d]; rotates dims < r (r = cos width) as NeoX pairs (i, i + r/2); dims >= r unchanged."""
    r = cos.shape[-1]
    if r == 0:
        return x
    cos, sin = cos[:, None], sin[:, None]
    rot, rest = x[..., :r], x[..., r:]
    half = r // 2
    rotated_half = torch.cat([-rot[..., half:], rot[..., :half]], dim=-1)
    return torch.cat([rot * cos + rotated_half * sin, rest], dim=-1)


class CCAProjection(nn.Module):
    """Compressed convolutional attention inputs (spec 5.5 a-c, f): q/k down-projections, two causal convs over
    time, q/k mean skip terms, values with a one-token delay on half the channels."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        H, A, Kv, C = cfg.hidden_size, cfg.q_width, cfg.kv_width, cfg.conv_channels
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(H, A, bias=bias)
        self.k_proj = nn.Linear(H, Kv, bias=bias)
        self.v_proj_current = nn.Linear(H, Kv // 2, bias=bias)
        self.v_proj_delayed = nn.Linear(H, Kv // 2, bias=bias)
        self.conv_qk_depthwise = nn.Conv1d(C, C, cfg.cca_time0, groups=C)
        self.conv_qk_grouped = nn.Conv1d(C, C, cfg.cca_time1, groups=cfg.num_attention_heads + cfg.num_key_value_heads)

    def forward(self, h, conv_mask=None, state=None):
        """h [B, S, H] -> q [B, S, Hq, d], k [B, S, Hk, d], v [B, S, Hk, d]. `state` (a LayerCache) supplies
        and receives the last P raw frames and the last delayed-value projection."""
        cfg = self.cfg
        B, S, _ = h.shape
        d, Hq, Hk, G, P = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.groups, cfg.conv_state_len
        if conv_mask is not None:
            h = h * conv_mask[:, :, None].to(h.dtype)  # padded rows enter as projection biases only
        q0 = self.q_proj(h)
        k0 = self.k_proj(h)
        # mean skip connections from the raw projections: Qr = (Q0 + K0[kv head of h]) / 2, Kr = group mean of Qr
        q_skip = 0.5 * (q0.view(B, S, Hq, d) + k0.view(B, S, Hk, d).repeat_interleave(G, dim=2))
        k_skip = q_skip.view(B, S, Hk, G, d).mean(dim=3)
        # causal convs over raw frames; fresh sequences start from P zero frames (never zero the intermediates)
        frames = torch.cat([q0, k0], dim=-1).transpose(1, 2)  # [B, C, S]
        if state is not None and state.has_state:
            frames = torch.cat([state.conv_state.to(frames.dtype), frames], dim=-1)
        else:
            frames = F.pad(frames, (P, 0))
        if state is not None:
            tail = frames[..., -P:]
            state.conv_state = F.pad(tail, (P - tail.shape[-1], 0))
        mixed = self.conv_qk_grouped(self.conv_qk_depthwise(frames)).transpose(1, 2)  # [B, S, C]
        q = mixed[..., : Hq * d].reshape(B, S, Hq, d) + q_skip
        k = mixed[..., Hq * d:].reshape(B, S, Hk, d) + k_skip
        # values: current half from token t, delayed half from token t-1 (seeded by the bias on a fresh sequence)
        v_current = self.v_proj_current(h)
        v_delayed_now = self.v_proj_delayed(h)
        if state is not None and state.has_state:
            seed = state.dv_state.to(v_delayed_now.dtype)[:, None]
        else:
            seed = self.v_proj_delayed(h.new_zeros(B, 1, h.shape[-1]))
        v_delayed = torch.cat([seed, v_delayed_now[:, :-1]], dim=1)
        if state is not None:
            state.dv_state = v_delayed_now[:, -1]
        v = torch.cat([v_current, v_delayed], dim=-1).view(B, S, Hk, d)
        return q, k, v


class QKNorm(nn.Module):
    """q <- sqrt(d) q / max(|q|, eps); k <- temp * sqrt(d) k / max(|k|, eps); eps = machine eps of the dtype."""

    def __init__(self, cfg):
        super().__init__()
        self.scale = cfg.head_dim ** 0.5
        self.temp = nn.Parameter(torch.zeros(cfg.num_key_value_heads))

    def forward(self, q, k):
        eps = torch.finfo(q.dtype).eps
        q = q * (self.scale / q.norm(p=2, dim=-1, keepdim=True).clamp_min(eps))
        k = k * (self.scale / k.norm(p=2, dim=-1, keepdim=True).clamp_min(eps))
        return q, k * self.temp[None, None, :, None]


class CCAAttention(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.cfg = cfg
        self.layer_type = cfg.layer_types[layer_idx]
        self.window = cfg.sliding_window if self.layer_type == "hybrid_sliding" else None
        self.qkv_proj = CCAProjection(cfg)
        self.qk_norm = QKNorm(cfg)
        self.o_proj = nn.Linear(cfg.q_width, cfg.hidden_size, bias=cfg.attention_bias)

    def forward(self, h, positions, key_padding, conv_mask, segments=None, state=None):
        """h [B,S,H]; positions [1 or B, S] RoPE positions; key_padding [B, seen+S] bool (True = real token) or None;
        segments [B,S] packed-document ids (attention stays inside a document) or None.
        Returns a [B,S,H]. With `state` the call continues the cached sequence and appends to it."""
        cfg = self.cfg
        B, S, _ = h.shape
        d, G = cfg.head_dim, cfg.groups
        q, k, v = self.qkv_proj(h, conv_mask, state)
        q, k = self.qk_norm(q, k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, S, d]
        cos, sin = rope_cos_sin(positions, cfg.rotary_dim(self.layer_type), cfg.rope_theta(self.layer_type), q.dtype)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # masks use stream indices (tokens seen before this call + t), RoPE uses the positions: like the reference
        seen = state.seen if state is not None else 0
        if state is not None and state.k is not None:
            k = torch.cat([state.k, k], dim=2)
            v = torch.cat([state.v, v], dim=2)
        T = k.shape[2]
        q_idx = torch.arange(seen, seen + S)
        k_idx = torch.arange(seen + S - T, seen + S)  # cached keys are contiguous and end before the new ones
        allowed = (k_idx[None, :] <= q_idx[:, None])[None].expand(B, S, T)
        if self.window is not None:
            allowed = allowed & (q_idx[:, None] - k_idx[None, :] < self.window)
        if key_padding is not None:
            allowed = allowed & key_padding[:, -T:][:, None, :].bool()
        if segments is not None:
            allowed = allowed & (segments[:, :, None] == segments[:, None, :])
        if state is not None:
            keep = T if self.window is None else min(T, self.window - 1)
            state.k, state.v = k[:, :, T - keep:], v[:, :, T - keep:]
        # GQA without copying K/V: query heads h = j*G + g of KV head j are contiguous, so view them as one
        # [G*S, d] block per KV head
        Hk = cfg.num_key_value_heads
        scores = torch.matmul(q.reshape(B, Hk, G * S, d), k.transpose(2, 3)) * d ** -0.5
        scores = scores.view(B, Hk, G, S, T)
        # additive mask (0 / -inf); rows without any allowed key (padded queries) are zeroed after the softmax
        has_key = allowed.any(dim=-1)  # [B, S]
        if not bool(allowed.all()):
            safe = allowed | ~has_key[..., None]  # keep such rows finite
            additive = torch.zeros(B, S, T, dtype=scores.dtype).masked_fill_(~safe, float("-inf"))
            scores = scores + additive[:, None, None]
        softmax_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        probs = torch.softmax(scores, dim=-1, dtype=softmax_dtype)
        if not bool(has_key.all()):
            probs = probs * has_key[:, None, None, :, None]
        out = torch.matmul(probs.to(q.dtype).view(B, Hk, G * S, T), v).view(B, cfg.num_attention_heads, S, d)
        out = out.transpose(1, 2).reshape(B, S, cfg.q_width)
        return self.o_proj(out)


class RouterMLP(nn.Module):
    def __init__(self, width, classes, eps):
        super().__init__()
        self.norm = RMSNorm(width, eps)
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)
        self.out_proj = nn.Linear(width, classes, bias=False)

    def forward(self, x, eps=None):
        x = self.norm(x, eps)
        x = F.gelu(self.fc1(x))  # exact erf GELU
        x = F.gelu(self.fc2(x))
        return self.out_proj(x)


class Router(nn.Module):
    """Router with Exponential Depth Averaging (spec 5.6). Classes 0..E-1 are experts, class E is the skip."""

    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.cfg = cfg
        R, E = cfg.router_hidden_size, cfg.num_experts
        self.down_proj = nn.Linear(cfg.hidden_size, R)
        self.use_eda = layer_idx != 0
        if self.use_eda:
            self.router_states_scale = nn.Parameter(torch.ones(R))
        self.router_mlp = RouterMLP(R, E + 1, cfg.rms_norm_eps)
        biases = torch.zeros(E + 1, dtype=torch.float32)
        biases[-1] = -1.0
        self.register_buffer("balancing_biases", biases)

    def forward(self, u, prev_state, semantics):
        """u [B,S,H] -> logits [B,S,E+1], probs [B,S,E+1], choice [B,S,k] (E = skip), new router state [B,S,R]."""
        rho = self.down_proj(u)
        if self.use_eda and prev_state is not None:
            rho = rho + prev_state * self.router_states_scale
        logits = self.router_mlp(rho, semantics.router_norm_eps)
        probs = torch.softmax(logits, dim=-1)
        biased = probs.detach().to(torch.float32) + self.balancing_biases.float()
        choice = torch.topk(biased, self.cfg.num_experts_per_tok, dim=-1).indices
        return logits, probs, choice, rho


class Experts(nn.Module):
    """E SwiGLU experts stored as [E, 2I, H] (gate rows first) and [E, H, I]; no biases."""

    def __init__(self, cfg):
        super().__init__()
        E, I, H = cfg.num_experts, cfg.moe_intermediate_size, cfg.hidden_size
        self.gate_up_proj = nn.Parameter(torch.empty(E, 2 * I, H))
        self.down_proj = nn.Parameter(torch.empty(E, H, I))

    def forward(self, u, choice, weight):
        """u [N,H], choice [N,k] (values >= E are skip slots and compute nothing), weight [N,k] -> [N,H].
        Tokens are sorted by expert so each expert runs one matmul over its contiguous group."""
        E = self.gate_up_proj.shape[0]
        N, k = choice.shape
        out = torch.zeros_like(u)
        token = torch.arange(N).repeat_interleave(k)
        expert = choice.reshape(-1)
        w = weight.reshape(-1)
        real = expert < E
        token, expert, w = token[real], expert[real], w[real]
        order = torch.argsort(expert, stable=True)
        token, expert, w = token[order], expert[order], w[order]
        counts = torch.bincount(expert, minlength=E).tolist()
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            rows = token[start:start + n]
            gate_up = u[rows] @ self.gate_up_proj[e].t()
            gate, up = gate_up.chunk(2, dim=-1)
            y = (F.silu(gate) * up) @ self.down_proj[e].t()
            out.index_add_(0, rows, (y * w[start:start + n, None]).to(out.dtype))
            start += n
        return out


class SparseMoE(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.cfg = cfg
        self.gate = Router(cfg, layer_idx)
        self.experts = Experts(cfg)

    def forward(self, u, prev_state, semantics):
        cfg = self.cfg
        B, S, H = u.shape
        E = cfg.num_experts
        logits, probs, choice, rho = self.gate(u, prev_state, semantics)
        weight = torch.gather(probs, -1, choice)  # not renormalised over the chosen set
        skip = choice == E
        weight = weight.masked_fill(skip, 0)  # native: a skip slot contributes nothing
        m = self.experts(u.reshape(B * S, H), choice.reshape(B * S, -1), weight.reshape(B * S, -1)).view(B, S, H)
        if semantics.skip_passthrough:
            # legacy MoD: the skip class passes the normed input through, scaled by its probability (top-1)
            p_skip = probs[..., E:E + 1]
            m = m + torch.where(skip.any(-1, keepdim=True), p_skip * u, torch.zeros_like(u))
        return m, logits, choice, rho


class DecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = CCAAttention(cfg, layer_idx)
        self.post_attention_residual_scale = ResidualScaling(cfg.hidden_size)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SparseMoE(cfg, layer_idx)
        self.post_mlp_residual_scale = ResidualScaling(cfg.hidden_size)

    def forward(self, x, router_state, positions, key_padding, conv_mask, segments, semantics, state=None):
        h = self.input_layernorm(x)
        a = self.self_attn(h, positions, key_padding, conv_mask, segments, state)
        y = self.post_attention_residual_scale(a, x)
        u = self.post_attention_layernorm(y)
        m, router_logits, choice, router_state = self.mlp(u, router_state, semantics)
        x = self.post_mlp_residual_scale(m, y)
        return x, router_state, router_logits, choice


class ZayaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.input_hidden_states_scale = nn.Parameter(torch.ones(cfg.hidden_size))
        self.input_hidden_states_bias = nn.Parameter(torch.zeros(cfg.hidden_size))
        self.layers = nn.ModuleList([DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


# ----------------------------------------------------------------------------------------------------------------
# Cache (spec 7)


class LayerCache:
    def __init__(self):
        self.k = None  # [B, Hk, T, d] after QK-norm, temperature and RoPE
        self.v = None  # [B, Hk, T, d]
        self.conv_state = None  # [B, C, P] last raw frames, oldest first
        self.dv_state = None  # [B, Kv/2] delayed-value projection of the last token
        self.has_state = False
        self.seen = 0  # tokens of the stream before the current call


class ZayaCache:
    def __init__(self, num_layers):
        self.layers = [LayerCache() for _ in range(num_layers)]
        self.seen = 0  # all tokens seen (positions), not the trimmed cache length

    def clone(self):
        """Snapshot (rollback / speculative decoding need conv and delayed states too, not only K/V)."""
        c = ZayaCache(len(self.layers))
        c.seen = self.seen
        for dst, src in zip(c.layers, self.layers):
            for key in ("k", "v", "conv_state", "dv_state"):
                val = getattr(src, key)
                setattr(dst, key, None if val is None else val.clone())
            dst.has_state, dst.seen = src.has_state, src.seen
        return c


# ----------------------------------------------------------------------------------------------------------------
# The model


class ZayaForCausalLM(nn.Module):
    def __init__(self, cfg, semantics=None):
        super().__init__()
        self.config = cfg
        self.semantics = semantics or Semantics()
        self.model = ZayaModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=cfg.lm_head_bias)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @property
    def dtype(self):
        return self.model.embed_tokens.weight.dtype

    def to_dtype(self, dtype):
        """Cast parameters to the compute dtype; balancing biases stay fp32 (routing depends on them)."""
        self.to(dtype)
        for layer in self.model.layers:
            layer.mlp.gate.balancing_biases.data = layer.mlp.gate.balancing_biases.data.float()
        return self

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, targets=None, labels=None):
        """input_ids [B,S] int64. attention_mask [B, seen+S] (1 = real, 0 = pad) or None. position_ids [B,S] or None
        (then seen + 0..S-1, pads included, as the reference does). cache: ZayaCache to continue and update, or None.
        targets [B,S]: token predicted at each position (-100 = ignored); labels [B,S]: HF style (shifted here).
        Returns a dict: logits [B,S,V] fp32-or-compute dtype, hidden_states list of L+2 [B,S,H], router_logits and
        router_choice lists of L ([B,S,E+1] / [B,S,k], E = skip), and loss / per_token_loss when targets are given."""
        cfg = self.config
        B, S = input_ids.shape
        seen = cache.seen if cache is not None else 0
        segments = None
        if position_ids is None:
            position_ids = (torch.arange(S) + seen)[None]
        else:
            position_ids = torch.as_tensor(position_ids).expand(B, S)
            if attention_mask is None and cache is None:
                # restarting positions without a mask mean packed documents: the reference keeps attention inside
                # each document (its conv and value shift still cross the boundary, spec 7.5)
                step = torch.diff(position_ids, dim=1, prepend=position_ids[:, :1] - 1)
                if bool((step != 1).any()):
                    segments = (step != 1).cumsum(1)
        key_padding = None
        conv_mask = None
        if attention_mask is not None:
            attention_mask = torch.as_tensor(attention_mask)
            if attention_mask.shape != (B, seen + S):
                raise ValueError(f"attention_mask: expected shape {(B, seen + S)}, got {tuple(attention_mask.shape)}")
            key_padding = attention_mask.bool()
            # the input zeroing applies to multi-token calls with actual padding only (reference behaviour)
            if S > 1 and not bool(key_padding.all()):
                conv_mask = attention_mask[:, -S:]
        emb = self.model.embed_tokens(input_ids)
        x = ((emb + self.model.input_hidden_states_bias) * self.model.input_hidden_states_scale).to(torch.float32)
        hidden_states = [x]
        router_logits, router_choice = [], []
        router_state = None
        for i, layer in enumerate(self.model.layers):
            state = cache.layers[i] if cache is not None else None
            x, router_state, logits_i, choice_i = layer(x, router_state, position_ids, key_padding, conv_mask,
                                                        segments, self.semantics, state)
            if state is not None:
                state.has_state = True
                state.seen += S
            hidden_states.append(x)
            router_logits.append(logits_i)
            router_choice.append(choice_i)
        z = self.model.norm(x)
        hidden_states.append(z)
        logits = self.lm_head(z)
        if cache is not None:
            cache.seen += S
        out = {"logits": logits, "hidden_states": hidden_states, "router_logits": router_logits,
               "router_choice": router_choice}
        if labels is not None and targets is None:
            targets = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], -100)], dim=1)
        if targets is not None:
            ce_logits = logits if logits.dtype == torch.float64 else logits.float()  # CE in fp32 (fp64 probes)
            per_token = F.cross_entropy(ce_logits.reshape(-1, cfg.vocab_size), targets.reshape(-1),
                                        ignore_index=-100, reduction="none").view(B, S)
            count = (targets != -100).sum()
            out["per_token_loss"] = per_token
            out["loss"] = per_token.sum() / count
        return out


# ----------------------------------------------------------------------------------------------------------------
# Initialisation, loading, saving


@torch.no_grad()
def init_weights(model, seed=0):
    """Hugging Face initialisation (spec 9.2): N(0, initializer_range) for linear / conv / embedding / expert
    weights, zero biases and pad-row embedding, ones for norm weights / scales / EDA scales, zero residual biases,
    temp 0, balancing biases (0, ..., 0, -1)."""
    cfg = model.config
    std = cfg.initializer_range
    gen = torch.Generator().manual_seed(seed)

    def normal_(t):
        t.copy_(torch.randn(t.shape, generator=gen, dtype=torch.float32).to(t.dtype) * std)

    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv1d)):
            normal_(module.weight)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.Embedding):
            normal_(module.weight)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, RMSNorm):
            module.weight.fill_(1.0)
        elif isinstance(module, ResidualScaling):
            module.hidden_states_scale.fill_(1.0)
            module.residual_scale.fill_(1.0)
            module.hidden_states_bias.zero_()
            module.residual_bias.zero_()
        elif isinstance(module, QKNorm):
            module.temp.zero_()
        elif isinstance(module, Router):
            if module.use_eda:
                module.router_states_scale.fill_(1.0)
            module.balancing_biases.zero_()
            module.balancing_biases[-1] = -1.0
        elif isinstance(module, Experts):
            normal_(module.gate_up_proj)
            normal_(module.down_proj)
        elif isinstance(module, ZayaModel):
            module.input_hidden_states_scale.fill_(1.0)
            module.input_hidden_states_bias.zero_()
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model


def expected_tensor_shapes(cfg):
    """Native checkpoint name -> shape (spec 4); lm_head.weight only when untied."""
    H, A, Kv, C, d = cfg.hidden_size, cfg.q_width, cfg.kv_width, cfg.conv_channels, cfg.head_dim
    R, E, I, V = cfg.router_hidden_size, cfg.num_experts, cfg.moe_intermediate_size, cfg.vocab_size
    shapes = {"model.embed_tokens.weight": [V, H], "model.input_hidden_states_scale": [H],
              "model.input_hidden_states_bias": [H], "model.norm.weight": [H]}
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = [V, H]
    if cfg.lm_head_bias:
        shapes["lm_head.bias"] = [V]
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = [H]
        for name, rows in (("q_proj", A), ("k_proj", Kv), ("v_proj_current", Kv // 2), ("v_proj_delayed", Kv // 2)):
            shapes[p + f"self_attn.qkv_proj.{name}.weight"] = [rows, H]
            if cfg.attention_bias:
                shapes[p + f"self_attn.qkv_proj.{name}.bias"] = [rows]
        shapes[p + "self_attn.qkv_proj.conv_qk_depthwise.weight"] = [C, 1, cfg.cca_time0]
        shapes[p + "self_attn.qkv_proj.conv_qk_depthwise.bias"] = [C]
        shapes[p + "self_attn.qkv_proj.conv_qk_grouped.weight"] = [C, d, cfg.cca_time1]
        shapes[p + "self_attn.qkv_proj.conv_qk_grouped.bias"] = [C]
        shapes[p + "self_attn.qk_norm.temp"] = [cfg.num_key_value_heads]
        shapes[p + "self_attn.o_proj.weight"] = [H, A]
        if cfg.attention_bias:
            shapes[p + "self_attn.o_proj.bias"] = [H]
        for mod in ("post_attention_residual_scale", "post_mlp_residual_scale"):
            for field in ("hidden_states_scale", "hidden_states_bias", "residual_scale", "residual_bias"):
                shapes[p + f"{mod}.{field}"] = [H]
        shapes[p + "post_attention_layernorm.weight"] = [H]
        shapes[p + "mlp.gate.down_proj.weight"] = [R, H]
        shapes[p + "mlp.gate.down_proj.bias"] = [R]
        if i > 0:
            shapes[p + "mlp.gate.router_states_scale"] = [R]
        shapes[p + "mlp.gate.router_mlp.norm.weight"] = [R]
        for fc in ("fc1", "fc2"):
            shapes[p + f"mlp.gate.router_mlp.{fc}.weight"] = [R, R]
            shapes[p + f"mlp.gate.router_mlp.{fc}.bias"] = [R]
        shapes[p + "mlp.gate.router_mlp.out_proj.weight"] = [E + 1, R]
        shapes[p + "mlp.gate.balancing_biases"] = [E + 1]
        shapes[p + "mlp.experts.gate_up_proj"] = [E, 2 * I, H]
        shapes[p + "mlp.experts.down_proj"] = [E, H, I]
    return shapes


def read_checkpoint_tensors(directory):
    """All tensors of model.safetensors, or of the shards listed in model.safetensors.index.json."""
    index_path = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict):
            raise ConfigError(f"{index_path}: missing weight_map object")
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            for name, t in st.load(os.path.join(directory, shard)).items():
                if weight_map.get(name) != shard:
                    raise ConfigError(f"{index_path}: tensor {name} found in {shard} but mapped to {weight_map.get(name)}")
                tensors[name] = t
        missing = set(weight_map) - set(tensors)
        if missing:
            raise ConfigError(f"{index_path}: tensors listed but absent from their shard: {sorted(missing)[:5]}")
        return tensors
    path = os.path.join(directory, "model.safetensors")
    if not os.path.exists(path):
        raise ConfigError(f"{directory}: neither model.safetensors nor model.safetensors.index.json")
    return st.load(path)


def load_state(model, tensors, strict=True):
    """Copy native-named tensors into the model (converting dtype; balancing biases to fp32), checking names and
    shapes against the config."""
    cfg = model.config
    expected = expected_tensor_shapes(cfg)
    tensors = dict(tensors)
    if cfg.tie_word_embeddings and "lm_head.weight" in tensors:
        head = tensors.pop("lm_head.weight")
        if not torch.equal(head.float(), tensors.get("model.embed_tokens.weight", head).float()):
            raise ConfigError("lm_head.weight present in a tied checkpoint and different from the embedding")
    unknown = sorted(set(tensors) - set(expected))
    missing = sorted(set(expected) - set(tensors))
    if strict and (unknown or missing):
        msg = []
        if unknown:
            msg.append(f"unexpected tensors {unknown[:6]}")
        if missing:
            msg.append(f"missing tensors {missing[:6]}")
        if any(".bias" in n and "self_attn" in n for n in unknown + missing):
            msg.append(f"(attention_bias is {cfg.attention_bias} in the config)")
        raise ConfigError("checkpoint does not match the config: " + "; ".join(msg))
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    with torch.no_grad():
        for name, t in tensors.items():
            if list(t.shape) != expected[name]:
                raise ConfigError(f"tensor {name}: shape {list(t.shape)}, config expects {expected[name]}")
            if name.endswith("balancing_biases"):
                buffers[name].copy_(t.float())
            else:
                target = params[name]
                target.copy_(t.to(target.dtype))
    return model


def load_pretrained(directory, dtype=torch.float32, legacy_semantics=False, semantics=None):
    """HF-format directory -> ZayaForCausalLM in `dtype`. Legacy directories are mapped to native names; with
    legacy_semantics=True the model runs the semantics of the legacy code (skip passthrough, base router eps)."""
    cfg = ZayaConfig.from_file(os.path.join(directory, "config.json"))
    if semantics is None:
        semantics = Semantics.for_config(cfg, legacy=legacy_semantics)
    tensors = read_checkpoint_tensors(directory)
    if cfg.legacy_style is not None:
        tensors = legacy_to_native(tensors, cfg.num_hidden_layers)
    model = ZayaForCausalLM(cfg, semantics).to_dtype(dtype)
    load_state(model, tensors)
    return model.eval()


def native_state(model):
    """name -> tensor of the native checkpoint (tied head omitted)."""
    out = {}
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        out[name] = t.detach().clone()
    return out


def save_pretrained(model, directory, dtype=torch.float32, extra_config=None):
    os.makedirs(directory, exist_ok=True)
    d = model.config.to_dict()
    d["dtype"] = {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype]
    d.update(extra_config or {})
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(d, f, indent=2, sort_keys=True)
        f.write("\n")
    st.save({k: v.to(dtype) for k, v in native_state(model).items()}, os.path.join(directory, "model.safetensors"))


# ----------------------------------------------------------------------------------------------------------------
# Generation


@torch.no_grad()
def greedy_generate(model, prompt_ids, max_new_tokens, attention_mask=None):
    """Prefill the prompt through a fresh cache, then feed one token at a time. Returns (new tokens [B, n],
    step logits [B, n, V]: the last-position logits that chose each token)."""
    cache = ZayaCache(model.config.num_hidden_layers)
    out = model(prompt_ids, attention_mask=attention_mask, cache=cache)
    step_logits = [out["logits"][:, -1].float()]
    tokens = [step_logits[-1].argmax(-1)]
    mask = attention_mask
    for _ in range(max_new_tokens - 1):
        if mask is not None:
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        out = model(tokens[-1][:, None], attention_mask=mask, cache=cache)
        step_logits.append(out["logits"][:, -1].float())
        tokens.append(step_logits[-1].argmax(-1))
    return torch.stack(tokens, 1), torch.stack(step_logits, 1)


@torch.no_grad()
def greedy_generate_full(model, prompt_ids, max_new_tokens):
    """Greedy decoding by re-running the whole sequence each step (no cache): the cache-free cross-check."""
    ids = prompt_ids
    tokens, step_logits = [], []
    for _ in range(max_new_tokens):
        logits = model(ids)["logits"][:, -1].float()
        step_logits.append(logits)
        tokens.append(logits.argmax(-1))
        ids = torch.cat([ids, tokens[-1][:, None]], dim=1)
    return torch.stack(tokens, 1), torch.stack(step_logits, 1)


def main():
    import argparse

    parser = argparse.ArgumentParser(description="ZAYA1 reference model.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="greedy generation from a checkpoint directory")
    run.add_argument("directory")
    run.add_argument("--ids", default="2,10,20,30", help="comma-separated prompt ids")
    run.add_argument("--new", type=int, default=8, help="greedy tokens to generate")
    run.add_argument("--legacy", action="store_true", help="legacy semantics (legacy checkpoints)")
    run.add_argument("--bf16", action="store_true", help="bf16 compute (fp32 op set)")
    init = sub.add_parser("init", help="write a Hugging-Face-initialised checkpoint directory")
    init.add_argument("--config", required=True, help="native or legacy config.json")
    init.add_argument("--out", required=True, help="output directory (config.json + model.safetensors)")
    init.add_argument("--seed", type=int, default=0)
    init.add_argument("--bf16", action="store_true", help="store BF16 tensors")
    args = parser.parse_args()
    if args.command == "init":
        cfg = ZayaConfig.from_file(args.config)
        model = init_weights(ZayaForCausalLM(cfg), seed=args.seed)
        save_pretrained(model, args.out, torch.bfloat16 if args.bf16 else torch.float32)
        print(json.dumps({"out": args.out, "parameters": sum(p.numel() for p in model.parameters())}))
        return
    model = load_pretrained(args.directory, torch.bfloat16 if args.bf16 else torch.float32, args.legacy)
    ids = torch.tensor([[int(x) for x in args.ids.split(",")]])
    new, _ = greedy_generate(model, ids, args.new)
    print(json.dumps({"prompt": ids[0].tolist(), "new_tokens": new[0].tolist(),
                      "semantics": model.semantics.describe(), "legacy_style": model.config.legacy_style}))


if __name__ == "__main__":
    main()
