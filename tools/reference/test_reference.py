"""Unit tests of the reference tools: /usr/bin/python3 -m unittest discover -s tools/reference -p 'test_*.py'

Covers the safetensors reader on malformed files, config validation (native and legacy), the legacy name
mapping, checkpoint/config mismatches, cache equivalences (chunked prefill, sliding trimming), padding
independence, the skip-class agreement test of spec 5.7, and the HF initialisation.
"""

import json
import os
import struct
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
import zaya_ref  # noqa: E402

TINY = dict(vocab_size=64, hidden_size=16, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
            head_dim=4, moe_intermediate_size=8, num_experts=3, router_hidden_size=8, cca_time0=2, cca_time1=3,
            layer_types=["hybrid_sliding", "hybrid", "hybrid_sliding"], sliding_window=3, attention_bias=True,
            lm_head_bias=True, tie_word_embeddings=False)


def tiny_model(seed=0, **overrides):
    cfg = zaya_ref.ZayaConfig(**{**TINY, **overrides})
    model = zaya_ref.ZayaForCausalLM(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if p.dim() == 1 else 0.0))
    return model.eval()


class SafetensorsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "x.safetensors")

    def tearDown(self):
        self.dir.cleanup()

    def test_round_trip(self):
        tensors = {"a": torch.randn(3, 4), "b": torch.randn(5).to(torch.bfloat16), "c": torch.arange(6)}
        st.save(tensors, self.path)
        back = st.load(self.path)
        for k, v in tensors.items():
            self.assertEqual(back[k].dtype, v.dtype)
            self.assertTrue(torch.equal(back[k], v))

    def write_bytes(self, raw):
        with open(self.path, "wb") as f:
            f.write(raw)

    def write_raw(self, header_bytes, data=b"", length=None):
        with open(self.path, "wb") as f:
            f.write(struct.pack("<Q", len(header_bytes) if length is None else length))
            f.write(header_bytes)
            f.write(data)

    def test_malformed(self):
        cases = {
            "short": lambda: self.write_bytes(b"\x01\x02"),
            "length past end": lambda: self.write_raw(b"{}", length=1000),
            "not json": lambda: self.write_raw(b"{nope"),
            "not object": lambda: self.write_raw(b"[1,2]"),
            "bad dtype": lambda: self.write_raw(json.dumps({"a": {"dtype": "Q8", "shape": [1],
                                                                  "data_offsets": [0, 1]}}).encode(), b"\0"),
            "offsets vs shape": lambda: self.write_raw(json.dumps({"a": {"dtype": "F32", "shape": [2],
                                                                        "data_offsets": [0, 4]}}).encode(), b"\0" * 8),
            "offsets past data": lambda: self.write_raw(json.dumps({"a": {"dtype": "F32", "shape": [2],
                                                                         "data_offsets": [0, 8]}}).encode(), b"\0" * 4),
        }
        for name, write in cases.items():
            with self.subTest(name):
                write()
                with self.assertRaises(st.SafetensorsError):
                    st.load(self.path)


class ConfigTest(unittest.TestCase):
    def test_native_errors(self):
        bad = {
            "top-k 2": dict(num_experts_per_tok=2),
            "heads": dict(num_attention_heads=3),
            "sliding without window": dict(sliding_window=None),
            "odd kv width": dict(num_key_value_heads=1, head_dim=3, num_attention_heads=2),
            "P = 0": dict(cca_time0=1, cca_time1=1),
            "odd rotary": dict(rope_parameters={t: {"rope_theta": 1e4, "partial_rotary_factor": 0.25}
                                                for t in ("hybrid", "hybrid_sliding")}),
            "unknown layer type": dict(layer_types=["hybrid", "full_attention", "hybrid"]),
            "missing rope entry": dict(rope_parameters={"hybrid": {"rope_theta": 1e4}}),
            "layer count": dict(layer_types=["hybrid"]),
            "activation": dict(hidden_act="gelu"),
        }
        for name, fields in bad.items():
            with self.subTest(name), self.assertRaises(zaya_ref.ConfigError):
                zaya_ref.ZayaConfig(**{**TINY, **fields})

    def test_rope_factor_default_is_one_inside_a_dict(self):
        cfg = zaya_ref.ZayaConfig(**{**TINY, "layer_types": ["hybrid"] * 3,
                                     "rope_parameters": {"hybrid": {"rope_theta": 1e4}}})
        self.assertEqual(cfg.rotary_dim("hybrid"), cfg.head_dim)
        cfg = zaya_ref.ZayaConfig(**{**TINY, "rope_parameters": None})
        self.assertEqual(cfg.rotary_dim("hybrid"), cfg.head_dim // 2)

    def test_legacy_styles(self):
        base = {"zaya_layers": ["a", 4, "a", 4], "cca_num_q_heads": [2, 0, 2, 0], "num_query_groups_list": [2, 0, 2, 0],
                "ffn_hidden_size_list": [0, 16, 0, 16], "zaya_mlp_expansion": [0, 8, 0, 8], "num_attention_heads": 4,
                "num_key_value_heads": 2, "hidden_size": 16, "vocab_size": 32, "norm_epsilon": 1e-5}
        cfg = zaya_ref.ZayaConfig.from_dict(base)
        self.assertEqual((cfg.legacy_style, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.head_dim,
                          cfg.moe_intermediate_size, cfg.router_hidden_size, cfg.num_experts),
                         ("base", 2, 2, 4, 8, 8, 4))
        self.assertEqual(zaya_ref.Semantics.for_config(cfg, legacy=True).router_norm_eps, 1e-6)
        scalar = {"num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 2, "num_query_groups": 2,
                  "head_dim": 4, "ffn_hidden_size": 16, "num_experts": 4, "zaya_mlp_expansion": 8,
                  "moe_router_topk": 1, "hidden_size": 16, "vocab_size": 32, "swa_layers": [3, 0, 0, 0]}
        cfg = zaya_ref.ZayaConfig.from_dict(scalar)
        self.assertEqual((cfg.legacy_style, cfg.layer_types, cfg.sliding_window), ("8b", ["hybrid_sliding", "hybrid"], 4))
        self.assertIsNone(zaya_ref.Semantics.for_config(cfg, legacy=True).router_norm_eps)
        for name, fields in {"uncompressed heads": {**base, "num_attention_heads": 2},
                             "mod off": {**base, "zaya_use_mod": False},
                             "clamp_temp": {**scalar, "clamp_temp": True},
                             "odd half layers": {**scalar, "num_hidden_layers": 3},
                             "groups": {**scalar, "num_query_groups": 1},
                             "list length": {**base, "cca_num_q_heads": [2, 0]}}.items():
            with self.subTest(name), self.assertRaises(zaya_ref.ConfigError):
                zaya_ref.ZayaConfig.from_dict(fields)


class CheckpointTest(unittest.TestCase):
    def test_legacy_round_trip_and_errors(self):
        model = tiny_model()
        native = zaya_ref.native_state(model)
        legacy = zaya_ref.native_to_legacy(native, model.config.num_hidden_layers)
        self.assertTrue(any(".local_experts.2.linear_fc2.weight" in k for k in legacy))
        back = zaya_ref.legacy_to_native(legacy, model.config.num_hidden_layers)
        self.assertEqual(sorted(back), sorted(native))
        for k in native:
            self.assertTrue(torch.equal(back[k], native[k]), k)
        with self.assertRaises(zaya_ref.ConfigError):
            zaya_ref.legacy_to_native({"model.layers.1.zaya_block.mystery": torch.zeros(1)}, 3)
        with self.assertRaises(zaya_ref.ConfigError):
            zaya_ref.legacy_to_native({"model.layers.9.input_norm.weight": torch.zeros(1)}, 3)

    def test_mismatches(self):
        model = tiny_model()
        native = zaya_ref.native_state(model)
        fresh = zaya_ref.ZayaForCausalLM(model.config)
        missing = {k: v for k, v in native.items() if not k.endswith("o_proj.bias")}
        wrong = dict(native, **{"model.norm.weight": torch.zeros(3)})
        extra = dict(native, **{"model.layers.0.mlp.gate.router_states_scale": torch.zeros(8)})
        for name, tensors in {"missing bias": missing, "shape": wrong, "block 0 EDA scale": extra}.items():
            with self.subTest(name), self.assertRaises(zaya_ref.ConfigError):
                zaya_ref.load_state(fresh, tensors)
        zaya_ref.load_state(fresh, native)  # the complete set loads

    def test_sharded_directory(self):
        model = tiny_model()
        native = zaya_ref.native_state(model)
        with tempfile.TemporaryDirectory() as d:
            zaya_ref.save_pretrained(model, d)
            os.remove(os.path.join(d, "model.safetensors"))
            names = sorted(native)
            parts = {"a.safetensors": names[::2], "b.safetensors": names[1::2]}
            for shard, keys in parts.items():
                st.save({k: native[k] for k in keys}, os.path.join(d, shard))
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                json.dump({"weight_map": {k: s for s, keys in parts.items() for k in keys}}, f)
            loaded = zaya_ref.load_pretrained(d)
            ids = torch.tensor([[2, 5, 7, 9]])
            self.assertTrue(torch.equal(loaded(ids)["logits"], model(ids)["logits"]))


class SemanticsTest(unittest.TestCase):
    def test_chunked_prefill_and_sliding_trim(self):
        model = tiny_model(1)
        ids = torch.randint(1, 64, (2, 11), generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            full = model(ids)["logits"]
            for chunks in ([11], [1] * 11, [4, 1, 6], [2, 3, 3, 3]):
                cache = zaya_ref.ZayaCache(3)
                start, outs = 0, []
                for n in chunks:
                    outs.append(model(ids[:, start:start + n], cache=cache)["logits"])
                    start += n
                self.assertLess(float((torch.cat(outs, 1) - full).abs().max()), 1e-5, chunks)
                self.assertEqual(cache.layers[0].k.shape[2], 2)  # sliding layer keeps W - 1 keys
                self.assertEqual(cache.layers[1].k.shape[2], 11)  # global layer keeps all

    def test_pad_content_does_not_leak(self):
        model = tiny_model(2)
        ids = torch.randint(1, 64, (1, 8), generator=torch.Generator().manual_seed(4))
        mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1]])
        other = ids.clone()
        other[0, :3] = torch.tensor([7, 8, 9])
        with torch.no_grad():
            a = model(ids, attention_mask=mask)["logits"][0, 3:]
            b = model(other, attention_mask=mask)["logits"][0, 3:]
        self.assertTrue(torch.equal(a, b))

    def test_skip_never_chosen_makes_legacy_equal_native(self):
        model = tiny_model(5)
        with torch.no_grad():
            for layer in model.model.layers:
                layer.mlp.gate.balancing_biases.copy_(torch.tensor([0.0, 0.0, 0.0, -1.0]))
        ids = torch.randint(1, 64, (2, 7), generator=torch.Generator().manual_seed(6))
        with torch.no_grad():
            native = model(ids)["logits"]
            model.semantics = zaya_ref.Semantics(skip_passthrough=True)
            legacy = model(ids)["logits"]
        self.assertTrue(torch.equal(native, legacy))

    def test_pad_row_gets_only_head_gradient(self):
        model = tiny_model(7, tie_word_embeddings=True, lm_head_bias=False)
        ids = torch.tensor([[2, 0, 5, 0, 9]])
        out = model(ids, targets=torch.tensor([[0, 5, 0, 9, -100]]))
        out["loss"].backward()
        tied = model.model.embed_tokens.weight.grad[0].clone()
        model.zero_grad()
        model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())
        out = model(ids, targets=torch.tensor([[0, 5, 0, 9, -100]]))
        out["loss"].backward()
        self.assertTrue(torch.equal(model.model.embed_tokens.weight.grad[0], torch.zeros_like(tied)))
        self.assertLess(float((model.lm_head.weight.grad[0] - tied).abs().max()), 1e-7)

    def test_init(self):
        cfg = zaya_ref.ZayaConfig(**{**TINY, "vocab_size": 512, "hidden_size": 64})
        model = zaya_ref.init_weights(zaya_ref.ZayaForCausalLM(cfg), seed=1)
        layer = model.model.layers[1]
        self.assertTrue(torch.equal(layer.mlp.gate.balancing_biases, torch.tensor([0.0, 0.0, 0.0, -1.0])))
        self.assertTrue(torch.equal(layer.self_attn.qk_norm.temp, torch.zeros(2)))
        self.assertTrue(torch.equal(model.model.embed_tokens.weight[0], torch.zeros(64)))
        self.assertAlmostEqual(float(model.model.embed_tokens.weight[1:].std()), 0.02, delta=0.002)
        self.assertTrue(torch.equal(layer.self_attn.qkv_proj.q_proj.bias, torch.zeros_like(layer.self_attn.qkv_proj.q_proj.bias)))
        self.assertTrue(torch.equal(layer.post_mlp_residual_scale.residual_scale, torch.ones(64)))

    def test_bf16_compute_keeps_fp32_routing_biases(self):
        model = tiny_model(8).to_dtype(torch.bfloat16)
        out = model(torch.tensor([[2, 3, 4, 5]]))
        self.assertEqual(model.model.layers[0].mlp.gate.balancing_biases.dtype, torch.float32)
        self.assertEqual(out["hidden_states"][1].dtype, torch.float32)  # residual stream
        self.assertEqual(out["logits"].dtype, torch.bfloat16)


if __name__ == "__main__":
    unittest.main()
