"""Turn weight-only int8 ONNX weights back into float32 initializers.

The packaged MiniLM stores each weight as an int8 initializer W_q with a float scale and
computes W = Cast(W_q) * scale on every call, then runs a float MatMul. Folding those two
nodes into one float32 initializer gives the float model that
onnxruntime.quantization.quantize_dynamic expects as input.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper


def fold_weight_dequantization(model: onnx.ModelProto) -> int:
    """Replace every Mul(Cast(int8 initializer), float initializer) by its float32 value, in
    place; returns how many weights were folded."""
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    users: dict[str, int] = {}
    for n in g.node:
        for x in n.input:
            users[x] = users.get(x, 0) + 1
    drop, folded = set(), []
    for mul in g.node:
        if mul.op_type != "Mul" or len(mul.input) != 2:
            continue
        cast = producer.get(mul.input[0])
        scale = inits.get(mul.input[1])
        if cast is None or cast.op_type != "Cast" or scale is None or users.get(cast.output[0]) != 1:
            continue
        q = inits.get(cast.input[0])
        if q is None or q.data_type != onnx.TensorProto.INT8:
            continue
        value = numpy_helper.to_array(q).astype(np.float32) * numpy_helper.to_array(scale).astype(np.float32)
        folded.append(numpy_helper.from_array(value.astype(np.float32), mul.output[0]))
        drop.update((id(mul), id(cast)))
    kept = [n for n in g.node if id(n) not in drop]
    del g.node[:]
    g.node.extend(kept)
    g.initializer.extend(folded)
    used = {x for n in g.node for x in n.input} | {o.name for o in g.output}
    unused = [i for i in g.initializer if i.name not in used]
    for i in unused:
        g.initializer.remove(i)
    return len(folded)
