"""A BERT checkpoint (safetensors) -> an fp32 ONNX graph with the int8 graph's inputs and output, once at build time.

torch's TorchScript exporter: measured byte-identical across runs for one set of library versions, so the manifest
pins the graph's checksum. torch, transformers and onnx are imported here only.
"""
from __future__ import annotations

import warnings
from pathlib import Path

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT = "last_hidden_state"


def bert_to_onnx(checkpoint: Path, out: Path) -> Path:
    """Write the encoder's last hidden states (batch, tokens, dim) as a graph over dynamic batch and length."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(checkpoint, local_files_only=True).eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    example = tuple(torch.ones(2, 16, dtype=torch.long) for _ in INPUTS)
    axes = {name: {0: "batch", 1: "tokens"} for name in (*INPUTS, OUTPUT)}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer notes about shapes the dynamic axes already cover
        torch.onnx.export(LastHiddenState(model), example, str(out), input_names=list(INPUTS),
                          output_names=[OUTPUT], dynamic_axes=axes, opset_version=17, dynamo=False)
    return out
