"""Streams that stay independent, mapped (zero-copy) and managed memory.

An unmodified CUDA program (cuda/streams.cu) against a sim server whose
long kernel's time is modelled (cuda/stream_kernels.py):

    idle_sync     cudaStreamSynchronize of an idle stream, alone and while
                  another stream runs a KERNEL_MS kernel (goal: within 2x)
    concurrency   one KERNEL_MS kernel on each of N streams, against the same
                  N kernels one after the other on one stream (the sim runs
                  kernels of different streams at once, up to 128)
    zero_copy     a kernel adding 1 to BYTES of input: the host writes the
                  input into mapped memory and reads the output there, against
                  the same with cudaMemcpy both ways and device buffers
    managed       a kernel filling N MiB that the host then reads (a byte of
                  each page): managed memory after cudaDeviceSynchronize,
                  with and without cudaMemPrefetchAsync to the host first,
                  against device memory and a cudaMemcpy to a host buffer
                  (goal: within GOAL_MANAGED at 64 MiB)
    managed_delta cudaDeviceSynchronize and the host reading what changed,
                  after a kernel changed 1 MiB of a DELTA_MIB managed
                  allocation, and after one changed all of it (only what
                  changed comes back: goal GOAL_DELTA of the whole); and
                  cudaDeviceSynchronize after a kernel changed all of it
                  that the host does not read, against the same kernel on
                  device memory.  Both managed modes run again with
                  RCUDA_MANAGED_ON_TOUCH=1, where only what the host
                  touches comes back (goals GOAL_DELTA, GOAL_UNTOUCHED)
"""
from __future__ import annotations

from pathlib import Path

from .. import common
from ..common import Context, goal

NAME = "streams"
TITLE = "Independent streams, mapped and managed memory"

KERNELS = Path(common.__file__).resolve().parent / "cuda" / "stream_kernels.py"
GOAL_IDLE_SYNC = 2.0
GOAL_MANAGED = 1.5
GOAL_DELTA = 0.1
GOAL_UNTOUCHED = 1.2


def parameters(quick: bool) -> dict:
    return {"kernel_ms": 300, "idle_syncs": 50 if quick else 300, "streams": 8, "concurrency_kernel_ms": 100,
            "zero_copy_bytes": (4 if quick else 64) << 20, "zero_copy_repeats": 2 if quick else 5,
            "managed_mib": [4, 64] if quick else [1, 4, 16, 64], "managed_repeats": 3 if quick else 5,
            "delta_mib": 64 if quick else 256, "delta_repeats": 3 if quick else 5}


def run(ctx: Context) -> dict:
    params = parameters(ctx.quick)
    ctx.progress("building cuda/streams.cu")
    binary = common.compile_cuda("streams.cu")
    with common.sim_server(kernels=KERNELS) as server:
        def program(*args, env=None):
            server.wait_idle()
            return common.run_program([binary, *args], env=common.rcuda_environment(server.address, env))

        ctx.progress(f"idle-stream syncs, alone and beside a {params['kernel_ms']} ms kernel")
        idle = program("idle-sync", params["kernel_ms"], params["idle_syncs"])
        ctx.progress(f"{params['streams']} streams of {params['concurrency_kernel_ms']} ms kernels")
        concurrency = program("concurrency", params["concurrency_kernel_ms"], params["streams"])
        ctx.progress(f"zero copy vs explicit copies, {params['zero_copy_bytes'] >> 20} MiB")
        zero_copy = program("zero-copy", params["zero_copy_bytes"], params["zero_copy_repeats"])
        managed, on_touch = [], {"RCUDA_MANAGED_ON_TOUCH": "1"}
        for mib in params["managed_mib"]:
            ctx.progress(f"managed memory touched vs cudaMemcpy, {mib} MiB")
            managed.append(program("managed", mib << 20, params["managed_repeats"]))
            managed[-1]["on_touch"] = program("managed", mib << 20, params["managed_repeats"], env=on_touch)
        ctx.progress(f"managed memory: 1 MiB of {params['delta_mib']} MiB changed, then all of it")
        delta = program("managed-delta", params["delta_mib"] << 20, params["delta_repeats"])
        delta["on_touch"] = program("managed-delta", params["delta_mib"] << 20, params["delta_repeats"], env=on_touch)
    managed_ratio = managed[-1]["managed_us"] / managed[-1]["memcpy_us"]
    delta_ratio = delta["part_us"] / delta["whole_us"]
    untouched_ratio = delta["untouched_us"] / delta["device_us"]
    touched = delta["on_touch"]
    touched_delta_ratio = touched["part_us"] / touched["whole_us"]
    touched_untouched_ratio = touched["untouched_us"] / touched["device_us"]
    idle_ratio = idle["beside_us"] / idle["alone_us"]
    speedup = concurrency["one_stream_us"] / concurrency["parallel_us"]
    return {"parameters": params, "idle_sync": idle, "concurrency": concurrency, "zero_copy": zero_copy,
            "managed": managed, "managed_delta": delta,
            "ratios": {"managed_1mib_changed_over_all_changed": round(delta_ratio, 3),
                       "managed_untouched_over_device_memory": round(untouched_ratio, 3),
                       "on_touch_managed_1mib_changed_over_all_changed": round(touched_delta_ratio, 3),
                       "on_touch_managed_untouched_over_device_memory": round(touched_untouched_ratio, 3),
                       "on_touch_managed_touch_over_memcpy_largest":
                           round(managed[-1]["on_touch"]["managed_us"] / managed[-1]["on_touch"]["memcpy_us"], 3),
                       "idle_sync_beside_a_kernel_over_alone": round(idle_ratio, 3),
                       "one_stream_over_n_streams": round(speedup, 3),
                       "zero_copy_over_explicit_copies": round(zero_copy["mapped_us"] / zero_copy["copies_us"], 3),
                       "managed_touch_over_memcpy_largest": round(managed_ratio, 3),
                       "managed_prefetched_over_memcpy_largest":
                           round(managed[-1]["prefetched_us"] / managed[-1]["memcpy_us"], 3)},
            "goals": {"idle-stream sync beside a running kernel / alone": goal(idle_ratio, "<=", GOAL_IDLE_SYNC),
                      f"{params['streams']} streams of kernels: speed-up over one stream":
                          goal(speedup, ">=", params["streams"] / 2),
                      f"managed memory touched / cudaMemcpy, {params['managed_mib'][-1]} MiB":
                          goal(managed_ratio, "<=", GOAL_MANAGED),
                      f"sync after 1 MiB of {params['delta_mib']} MiB managed changed / after all of it":
                          goal(delta_ratio, "<=", GOAL_DELTA),
                      "the same, RCUDA_MANAGED_ON_TOUCH=1": goal(touched_delta_ratio, "<=", GOAL_DELTA),
                      f"sync after a kernel wrote {params['delta_mib']} MiB managed the host does not read / "
                      f"device memory, RCUDA_MANAGED_ON_TOUCH=1": goal(touched_untouched_ratio, "<=", GOAL_UNTOUCHED)}}


def plot(result: dict, out_dir: Path) -> list[Path]:
    from .. import charts

    path = out_dir / "micro_streams.png"
    i, c, z = result["idle_sync"], result["concurrency"], result["zero_copy"]
    n = result["parameters"]["streams"]
    bars = [("idle-stream sync, alone (us)", i["alone_us"]), ("idle-stream sync beside a kernel (us)", i["beside_us"]),
            (f"{n} kernels on {n} streams (ms)", c["parallel_us"] / 1000),
            (f"{n} kernels on one stream (ms)", c["one_stream_us"] / 1000),
            (f"zero copy, {z['bytes'] >> 20} MiB (ms)", z["mapped_us"] / 1000),
            (f"explicit copies, {z['bytes'] >> 20} MiB (ms)", z["copies_us"] / 1000)]
    largest = result["managed"][-1]
    bars += [(f"managed, touched, {largest['bytes'] >> 20} MiB (ms)", largest["managed_us"] / 1000),
             (f"managed, prefetched to the host, {largest['bytes'] >> 20} MiB (ms)", largest["prefetched_us"] / 1000),
             (f"cudaMemcpy, {largest['bytes'] >> 20} MiB (ms)", largest["memcpy_us"] / 1000)]
    d = result["managed_delta"]
    bars += [(f"sync, 1 MiB of {d['bytes'] >> 20} MiB managed changed (ms)", d["part_us"] / 1000),
             (f"sync, all {d['bytes'] >> 20} MiB changed (ms)", d["whole_us"] / 1000),
             (f"sync, 1 MiB of {d['bytes'] >> 20} MiB managed changed, on touch (ms)", d["on_touch"]["part_us"] / 1000),
             (f"sync, all {d['bytes'] >> 20} MiB changed, not read (ms)", d["untouched_us"] / 1000),
             (f"sync, all {d['bytes'] >> 20} MiB changed, not read, on touch (ms)",
              d["on_touch"]["untouched_us"] / 1000),
             (f"sync, {d['bytes'] >> 20} MiB of device memory written (ms)", d["device_us"] / 1000)]
    charts.bars(result, path, bars, "us / ms (see labels)",
               "Independent streams, mapped and managed memory via rcuda (sim)")
    return [path]


def headline(result: dict) -> list[str]:
    i, c, z, r = result["idle_sync"], result["concurrency"], result["zero_copy"], result["ratios"]
    d = result["managed_delta"]
    t = d["on_touch"]
    return [f"idle-stream sync: {i['alone_us']:.1f} us alone, {i['beside_us']:.1f} us beside a running kernel "
            f"({r['idle_sync_beside_a_kernel_over_alone']:.2f}x, goal <= {GOAL_IDLE_SYNC})",
            f"{c['streams']} streams: {c['parallel_us'] / 1000:.0f} ms, one stream {c['one_stream_us'] / 1000:.0f} ms "
            f"({r['one_stream_over_n_streams']:.2f}x)",
            f"zero copy {z['mapped_us'] / 1000:.1f} ms vs explicit copies {z['copies_us'] / 1000:.1f} ms "
            f"({r['zero_copy_over_explicit_copies']:.2f}x) for {z['bytes'] >> 20} MiB",
            "managed memory touched after a kernel (on touch; on touch, prefetched first) vs cudaMemcpy: " + ", ".join(
                f"{m['bytes'] >> 20} MiB {m['managed_us'] / 1000:.1f} ({m['on_touch']['managed_us'] / 1000:.1f}; "
                f"{m['on_touch']['prefetched_us'] / 1000:.1f}) / {m['memcpy_us'] / 1000:.1f} ms"
                for m in result["managed"]) + f" (goal <= {GOAL_MANAGED}x at the largest)",
            f"sync after a kernel changed 1 MiB of {d['bytes'] >> 20} MiB managed: {d['part_us'] / 1000:.1f} ms, "
            f"after it changed all of it {d['whole_us'] / 1000:.1f} ms "
            f"({r['managed_1mib_changed_over_all_changed']:.3f}x, goal <= {GOAL_DELTA}); "
            f"all of it changed and not read {d['untouched_us'] / 1000:.1f} ms, "
            f"device memory {d['device_us'] / 1000:.1f} ms ({r['managed_untouched_over_device_memory']:.2f}x)",
            f"RCUDA_MANAGED_ON_TOUCH=1: 1 MiB of {d['bytes'] >> 20} MiB changed {t['part_us'] / 1000:.1f} ms "
            f"({r['on_touch_managed_1mib_changed_over_all_changed']:.3f}x, goal <= {GOAL_DELTA}); "
            f"all of it changed and not read {t['untouched_us'] / 1000:.1f} ms, device memory "
            f"{t['device_us'] / 1000:.1f} ms ({r['on_touch_managed_untouched_over_device_memory']:.2f}x, "
            f"goal <= {GOAL_UNTOUCHED})"]
