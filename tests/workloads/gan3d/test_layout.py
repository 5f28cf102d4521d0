"""The training step stays channels-last on a GPU in every precision: TensorFlow's own graph
optimiser (Grappler) is run on the step's graph for a virtual Hopper GPU (compute capability 9.0),
as it runs before a real GPU executes the step; without burst's setting it turns the float32
step to channels-first (checked too, so the test can fail), and TensorFlow 2.21 keeps the 16-bit
ones channels-last by itself."""

import pytest

from workloads.gan3d.presets import SMALL

GPU = "/job:localhost/replica:0/task:0/device:GPU:0"
CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


def _step_graph(precision: str):
    """The trainer's whole distributed step, traced, its ops placed on the GPU."""
    import tensorflow as tf

    from workloads.gan3d.train import GAN3DTrainer

    trainer = GAN3DTrainer(SMALL, 4, seed=0, precision=precision)
    spec = {"x": tf.TensorSpec([4, *SMALL.grid, 1], tf.float32), **{k: tf.TensorSpec([4], tf.float32) for k in ("y", "ang", "ecal")}}
    step = trainer._step.get_concrete_function(spec)
    graph = step.graph.as_graph_def()
    for node in [*graph.node, *(n for f in graph.library.function for n in f.node_def)]:
        node.device = node.device or GPU
    return graph, [t.name for t in step.outputs]


def _optimised_conv_formats(step, layout_optimizer_on: bool | None) -> list[str]:
    """What Grappler makes of ``graph`` for one Hopper GPU, under this process's options
    (``None``) or with the layout optimiser forced on or off: the data formats of every 3D
    convolution, forward and backward."""
    from tensorflow.core.protobuf import config_pb2, device_properties_pb2, meta_graph_pb2, rewriter_config_pb2
    from tensorflow.python.eager import context
    from tensorflow.python.grappler import cluster as grappler_cluster
    from tensorflow.python.grappler import tf_optimizer

    config = config_pb2.ConfigProto()
    config.CopyFrom(context.context().config)
    if layout_optimizer_on is not None:
        toggle = rewriter_config_pb2.RewriterConfig
        config.graph_options.rewrite_options.layout_optimizer = toggle.ON if layout_optimizer_on else toggle.OFF
    graph, outputs = step
    meta = meta_graph_pb2.MetaGraphDef()
    meta.graph_def.CopyFrom(graph)
    meta.collection_def["train_op"].node_list.value.extend(outputs)  # what Grappler must keep
    hopper = device_properties_pb2.DeviceProperties(type="GPU", environment={"architecture": "9.0"})
    cluster = grappler_cluster.Cluster(devices=[device_properties_pb2.NamedDevice(name=GPU, properties=hopper),
                                                device_properties_pb2.NamedDevice(name=CPU, properties=device_properties_pb2.DeviceProperties(type="CPU"))])
    optimised = tf_optimizer.OptimizeGraph(config, meta, cluster=cluster)
    nodes = list(optimised.node) + [n for f in optimised.library.function for n in f.node_def]
    return [n.attr["data_format"].s.decode() for n in nodes if n.op.startswith("Conv3D")]


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_the_step_stays_channels_last_on_a_hopper_gpu(precision):
    graph = _step_graph(precision)
    formats = _optimised_conv_formats(graph, None)
    assert len(formats) >= 3 * (len(SMALL.gen_blocks) + len(SMALL.disc_blocks))  # forward and both backward passes
    assert set(formats) == {"NDHWC"}
    by_default = set(_optimised_conv_formats(graph, True))
    assert by_default == ({"NCDHW"} if precision == "float32" else {"NDHWC"})
