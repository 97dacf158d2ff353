"""Regenerate the classify sample: the model (JPEG bytes -> top-5 labels) and its test images.

    python samples/classify/make_sample.py

Writes, next to this file:
- classifier.onnx: JpegDecode and VpcResize (DVPP), normalisation and a small CNN (AI Core),
  TopK (AI CPU) and a LabelEncoder from class index to name (host CPU);
- reference.onnx: the same network in standard ONNX from decoded pixels on (a `Resize` in
  place of VpcResize), for checking xgraph against Pillow + onnxruntime;
- images/*.jpg: a few deterministic pictures.

The CNN's weights come from a fixed seed, scaled by 1/sqrt(fan-in); the network is untrained,
so its classes only show the pipeline working, not a real recognition result.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
SIZE = 64
CLASSES = ["tench", "goldfish", "great white shark", "tiger shark", "hammerhead", "electric ray",
           "stingray", "cock", "hen", "ostrich"]
MEAN = np.array([123.675, 116.28, 103.53], np.float32)
STD = np.array([58.395, 57.12, 57.375], np.float32)


def _weights() -> list[onnx.TensorProto]:
    rng = np.random.default_rng(2024)

    def conv(name: str, cout: int, cin: int) -> list[onnx.TensorProto]:
        w = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        return [numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")]

    fc = (rng.standard_normal((len(CLASSES), 64)) / 8.0).astype(np.float32)
    return [*conv("conv1", 16, 3), *conv("conv2", 32, 16), *conv("conv3", 64, 32),
            numpy_helper.from_array(fc, "fc_w"),
            numpy_helper.from_array((rng.standard_normal(len(CLASSES)) * 0.1).astype(np.float32), "fc_b"),
            numpy_helper.from_array(MEAN, "mean"), numpy_helper.from_array((1 / STD).astype(np.float32), "inv_std"),
            numpy_helper.from_array(np.array([0], np.int64), "batch_axis"),
            numpy_helper.from_array(np.array([5], np.int64), "k")]


def _network(pixels: str) -> list[onnx.NodeProto]:
    """Nodes from a (64, 64, 3) uint8 picture to 'scores' and 'labels'."""
    mk = helper.make_node
    nodes = [mk("Cast", [pixels], ["pixels_f"], to=TensorProto.FLOAT, name="to_float"),
             mk("Sub", ["pixels_f", "mean"], ["centred"], name="sub_mean"),
             mk("Mul", ["centred", "inv_std"], ["normalised"], name="scale"),
             mk("Transpose", ["normalised"], ["chw"], perm=[2, 0, 1], name="hwc_to_chw"),
             mk("Unsqueeze", ["chw", "batch_axis"], ["x"], name="add_batch")]
    prev = "x"
    for i in (1, 2, 3):
        nodes += [mk("Conv", [prev, f"conv{i}_w", f"conv{i}_b"], [f"c{i}"], pads=[1, 1, 1, 1], strides=[2, 2],
                     name=f"conv{i}"),
                  mk("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        prev = f"r{i}"
    nodes += [mk("GlobalAveragePool", [prev], ["pooled"], name="gap"),
              mk("Flatten", ["pooled"], ["features"], name="flatten"),
              mk("Gemm", ["features", "fc_w", "fc_b"], ["logits"], transB=1, name="fc"),
              mk("Softmax", ["logits"], ["probs"], axis=-1, name="softmax"),
              mk("TopK", ["probs", "k"], ["scores", "top_index"], axis=-1, name="top5"),
              mk("LabelEncoder", ["top_index"], ["labels"], domain="ai.onnx.ml",
                 keys_int64s=list(range(len(CLASSES))), values_strings=CLASSES, default_string="?",
                 name="class_names")]
    return nodes


def _outputs() -> list[onnx.ValueInfoProto]:
    return [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 5]),
            helper.make_tensor_value_info("labels", TensorProto.STRING, [1, 5])]


def classifier_model() -> onnx.ModelProto:
    """JPEG bytes in, top-5 scores and labels out, with DVPP preprocessing."""
    mk = helper.make_node
    nodes = [mk("JpegDecode", ["jpeg"], ["picture"], domain="xgraph.dvpp", pixel_format="RGB", name="decode"),
             mk("VpcResize", ["picture"], ["pixels"], domain="xgraph.dvpp", height=SIZE, width=SIZE,
                mode="bilinear", name="resize")] + _network("pixels")
    graph = helper.make_graph(nodes, "classifier", [helper.make_tensor_value_info("jpeg", TensorProto.UINT8, ["bytes"])],
                              _outputs(), initializer=_weights())
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 4),
                                                   helper.make_opsetid("xgraph.dvpp", 1)], producer_name="xgraph-sample")


def reference_model() -> onnx.ModelProto:
    """The same network in standard ONNX from decoded pixels (H, W, 3) on: Resize stands in for VpcResize.

    The picture is resized as a 1-image NHWC batch, the layout onnxruntime's uint8 resize
    kernel takes (and the one VpcResize reproduces bit for bit).
    """
    mk = helper.make_node
    sizes = numpy_helper.from_array(np.array([1, SIZE, SIZE, 3], np.int64), "sizes")
    nodes = [mk("Unsqueeze", ["picture", "batch_axis"], ["batch"], name="as_batch"),
             mk("Resize", ["batch", "", "", "sizes"], ["resized"], mode="linear",
                coordinate_transformation_mode="half_pixel", name="resize"),
             mk("Squeeze", ["resized", "batch_axis"], ["pixels"], name="as_picture")] + _network("pixels")
    graph = helper.make_graph(nodes, "classifier_reference",
                              [helper.make_tensor_value_info("picture", TensorProto.UINT8, ["h", "w", 3])],
                              _outputs(), initializer=_weights() + [sizes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 4)],
                             producer_name="xgraph-sample")


def make_images(folder: Path) -> list[Path]:
    """A few deterministic JPEGs of different sizes (odd sizes included)."""
    from PIL import Image, ImageDraw
    folder.mkdir(exist_ok=True)
    paths = []
    for i, (w, h) in enumerate([(320, 240), (501, 377), (640, 480)]):
        yy, xx = np.mgrid[0:h, 0:w]
        rgb = np.stack([(xx * 255 // w), (yy * 255 // h), ((xx + yy) * 255 // (w + h))], -1).astype(np.uint8)
        img = Image.fromarray(np.roll(rgb, i, axis=-1))
        d = ImageDraw.Draw(img)
        d.ellipse([w // 4, h // 4, w // 2 + 40 * i, h // 2 + 30 * i], fill=(255 - 80 * i, 40 * i, 200))
        d.rectangle([w // 2, h // 3, w - 20, h - 20], outline=(0, 0, 0), width=5 + i)
        path = folder / f"sample{i}.jpg"
        img.save(path, quality=90)
        paths.append(path)
    return paths


def main() -> None:
    """Write the models and images."""
    import xgraph.ops  # noqa: F401 - registers the xgraph.dvpp schemas for the checker
    model = classifier_model()
    onnx.checker.check_model(model)
    onnx.save(model, str(HERE / "classifier.onnx"))
    ref = reference_model()
    onnx.checker.check_model(ref, full_check=True)
    onnx.save(ref, str(HERE / "reference.onnx"))
    for p in make_images(HERE / "images"):
        print("wrote", p.relative_to(HERE.parent.parent))
    print("wrote samples/classify/classifier.onnx and reference.onnx")


if __name__ == "__main__":
    main()
