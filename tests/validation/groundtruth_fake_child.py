#!/usr/bin/env python3
"""groundtruth_fake_child.py - stands in for `harness.py --probe` and
`harness.py --one JSON` in test_groundtruth.py, so the driver's bookkeeping
(outcomes, timeouts, atomic CSV, --resume, skipping) is tested without
PyTorch or a GPU. Every number it prints is invented: NOT a measurement.

FAKE_OUTCOMES (JSON: configuration name -> ok | oom | crash | hang) picks
what each configuration does (default ok); FAKE_TOTAL sets the device size
the probe reports; FAKE_LOG, when set, gets one line per --one call."""
import json
import os
import sys
import time

TAG = "GTRESULT "


def main():
    if sys.argv[1:] == ["--probe"]:
        print(TAG + json.dumps(dict(torch_version="fake", cuda_version="fake",
                                    gpu_name="FAKE-H200-NOT-A-MEASUREMENT",
                                    device_total_bytes=int(os.environ.get("FAKE_TOTAL",
                                                                          150 * 2 ** 30)))))
        return 0
    if len(sys.argv) != 3 or sys.argv[1] != "--one":
        print("fake child: bad arguments", file=sys.stderr)
        return 2
    c = json.loads(sys.argv[2])
    if os.environ.get("FAKE_LOG"):
        with open(os.environ["FAKE_LOG"], "a") as f:
            f.write(c["name"] + "\n")
    what = json.loads(os.environ.get("FAKE_OUTCOMES", "{}")).get(c["name"], "ok")
    if what == "crash":
        print("Traceback (most recent call last):\nRuntimeError: fake crash", file=sys.stderr)
        return 1
    if what == "hang":
        time.sleep(60)
        return 0
    r = dict(outcome=what, torch_version="fake", gpu_name="FAKE-H200-NOT-A-MEASUREMENT",
             max_allocated_bytes=1234, max_reserved_bytes=2048,
             alloc_conf="expandable_segments:" + ("True" if c["expandable_segments"] else "False"))
    if what == "ok":
        r.update(step_time_s=0.5, params=42)
    else:
        r.update(oom_phase="step 1 forward", error="OutOfMemoryError: fake")
    print("some chatter on stdout")
    print(TAG + json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
