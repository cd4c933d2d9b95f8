"""Checkpoints' `quantization_config` blocks of each format, read in the suite's vocabulary."""

from __future__ import annotations

import json

from quantize import formats

CT_W4A16 = {
    "quant_method": "compressed-tensors",
    "format": "pack-quantized",
    "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}},
}


FP8_STATIC = {
    "quant_method": "compressed-tensors",
    "config_groups": {
        "g": {
            "weights": {"num_bits": 8, "type": "float"},
            "input_activations": {"num_bits": 8, "type": "float", "dynamic": False},
        }
    },
}


FP8_DYNAMIC = json.loads(json.dumps(FP8_STATIC).replace('"dynamic": false', '"dynamic": true'))


INT8 = json.loads(
    json.dumps(FP8_STATIC).replace('"float"', '"int"').replace('"dynamic": false', '"dynamic": true')
)


def facts(quant: dict | None) -> formats.QuantFacts:
    return formats.quant_facts({"quantization_config": quant} if quant else {})
