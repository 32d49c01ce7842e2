"""tests/tensorboard_check.py: reads the event file that the case "tensorboard: sample run" of
tests/test_tensorboard.cpp wrote, with TensorBoard's own reader (EventFileLoader, which checks
the record CRCs), and checks every value against what that case wrote. Run by
tests/tensorboard_check.sh; exits non-zero with a message on the first difference."""
import glob
import math
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.util import tensor_util


def fail(msg):
    print("tensorboard_check: " + msg)
    sys.exit(1)


def main(log_dir):
    files = glob.glob(log_dir + "/events.out.tfevents.*")
    if len(files) != 1:
        fail("expected one event file in %s, found %d" % (log_dir, len(files)))
    events = list(EventFileLoader(files[0]).Load())
    if len(events) != 14:
        fail("expected 14 events, read %d" % len(events))
    if events[0].file_version != "brain.Event:2":
        fail("first event's file_version is %r" % events[0].file_version)

    acc = event_accumulator.EventAccumulator(log_dir, size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    for tag in ("loss/train", "lr"):
        if tag not in tags["scalars"]:
            fail("scalar tag %s missing (have %s)" % (tag, tags["scalars"]))
    loss = acc.Scalars("loss/train")
    lr = acc.Scalars("lr")
    if [e.step for e in loss] != list(range(5)):
        fail("loss steps %s" % [e.step for e in loss])
    for i, e in enumerate(loss):
        if abs(e.value - 1.0 / (i + 1)) > 1e-7 or e.wall_time != 1000.0 + i:
            fail("loss[%d] = %r at %r" % (i, e.value, e.wall_time))
    for i, e in enumerate(lr):
        if abs(e.value - 0.001 * i) > 1e-9:
            fail("lr[%d] = %r" % (i, e.value))

    h = acc.Histograms("weights/fc1")
    if len(h) != 1 or h[0].step != 3:
        fail("weights/fc1: %r" % h)
    hv = h[0].histogram_value
    values = [i / 10.0 for i in range(1000)]
    want = dict(min=0.0, max=99.9, num=1000.0, sum=sum(values), sum_squares=sum(v * v for v in values))
    for k, v in want.items():
        if abs(getattr(hv, k) - v) > 1e-9 * max(1.0, abs(v)):
            fail("weights/fc1 %s = %r, want %r" % (k, getattr(hv, k), v))
    limits = [99.9 * (i + 1) / 10 for i in range(10)]
    if len(hv.bucket_limit) != 10 or any(abs(a - b) > 1e-9 for a, b in zip(hv.bucket_limit, limits)):
        fail("weights/fc1 bucket_limit %s" % list(hv.bucket_limit))
    if list(hv.bucket) != [100.0] * 10:
        fail("weights/fc1 buckets %s" % list(hv.bucket))

    t = acc.Histograms("weights/tensor")[0].histogram_value  # [-1, 0, 0.5, 2, nan] in 3 bins of width 1: [-1, 0), [0, 1), [1, 2]
    if (t.min, t.max, t.num, t.sum) != (-1.0, 2.0, 5.0, 1.5) or list(t.bucket) != [1.0, 2.0, 1.0]:
        fail("weights/tensor %r" % t)
    if list(t.bucket_limit) != [0.0, 1.0, 2.0]:
        fail("weights/tensor bucket_limit %s" % list(t.bucket_limit))

    text = acc.Tensors("notes")
    if len(text) != 1 or text[0].step != 7:
        fail("notes: %r" % text)
    s = tensor_util.make_ndarray(text[0].tensor_proto)
    got = s.item() if hasattr(s, "item") else s
    if got != b"hello **brisk**":
        fail("notes = %r" % got)
    meta = acc.SummaryMetadata("notes")
    if meta.plugin_data.plugin_name != "text":
        fail("notes plugin %r" % meta.plugin_data.plugin_name)
    if not math.isclose(text[0].wall_time, 3000.0):
        fail("notes wall_time %r" % text[0].wall_time)
    print("tensorboard_check: %d events read back by TensorBoard %s, all values equal" % (len(events), tb_version()))


def tb_version():
    import tensorboard

    return tensorboard.__version__


if __name__ == "__main__":
    main(sys.argv[1])
