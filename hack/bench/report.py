#!/usr/bin/env python3
"""Turns the benchmarks' raw results into BENCHMARKS.md and benchmarks.json.

Inputs: Criterion's estimates (<target>/criterion/**/new/{benchmark,estimates}.json) from
host/benches/plugin_boundary.rs, the JSON that host/benches/controller_scale.rs writes, and
the scalability envelope's (host/benches/controller_envelope.rs, `make bench-scale`), kept in
hack/bench/envelope.json because that run takes long and `make bench` does not repeat it.
Without --criterion and --scale, those parts come from the benchmarks.json written last.
The analysis of the figures (hack/bench/analysis.md, written by people) is appended as is.
Standard library only.
"""
import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def criterion_results(directory: Path) -> dict:
    """full_id -> {median_ns, low_ns, high_ns, elements}, from each benchmark's latest run."""
    results = {}
    for bench in sorted(directory.glob("**/new/benchmark.json")):
        meta = json.loads(bench.read_text())
        estimates = json.loads((bench.parent / "estimates.json").read_text())
        median = estimates["median"]
        throughput = meta.get("throughput") or {}
        results[meta["full_id"]] = {
            "median_ns": median["point_estimate"],
            "low_ns": median["confidence_interval"]["lower_bound"],
            "high_ns": median["confidence_interval"]["upper_bound"],
            "elements": throughput.get("Elements"),
        }
    return results


def duration(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns:.1f} ns"


def plugin_section(c: dict) -> tuple[list[str], dict]:
    lines, data = [], {"evaluate": [], "component": {}, "fields": {}, "convert": {}}
    sizes = sorted(
        int(k.split("/")[-1]) for k in c if k.startswith("evaluate/wasm/")
    )
    lines += [
        "### `evaluate`: the default plugin versus the same policy in native Rust",
        "",
        "One call per Service with every candidate pod (the controller's path: a fresh Store and",
        "instance per call, under the deadline and memory limit). Native is the reference",
        "implementation in the benchmark, on the same records; the controller never uses it.",
        "",
        "| pods per call | Wasm per call | Wasm per pod | native per pod | Wasm / native |",
        "|---:|---:|---:|---:|---:|",
    ]
    for n in sizes:
        wasm = c[f"evaluate/wasm/{n}"]["median_ns"]
        native = c.get(f"evaluate/native/{n}", {}).get("median_ns")
        row = {"pods": n, "wasm_ns_per_call": wasm, "wasm_ns_per_pod": wasm / n}
        ratio = ""
        if native:
            row["native_ns_per_pod"] = native / n
            row["ratio"] = wasm / native
            ratio = f"{wasm / native:,.0f}x"
        data["evaluate"].append(row)
        lines.append(
            f"| {n:,} | {duration(wasm)} | {duration(wasm / n)} | "
            f"{duration(native / n) if native else 'n/a'} | {ratio} |"
        )
    lines.append("")

    component = {k.split("/", 1)[1]: v["median_ns"] for k, v in c.items() if k.startswith("component/")}
    if component:
        labels = {
            "compile": "compile the component (Cranelift)",
            "link": "link and pre-instantiate (`InstancePre`)",
            "instantiate": "fresh Store + instance + an empty `evaluate`",
            "prepare": "the whole load pipeline (hash, parse, compile, link, config, self-test)",
            "cached-load": "rescan of an unchanged plugin directory (the controller's reuse path)",
            "cached-load-rehash": "rescan after a touch that changes no byte (re-hash, no compile)",
            "deserialize": "load a precompiled component (`Component::deserialize`; not used)",
        }
        lines += ["### Loading a component", "", "| step | median |", "|---|---:|"]
        for key, ns in component.items():
            lines.append(f"| `{key}`: {labels.get(key, key)} | {duration(ns)} |")
            data["component"][key] = ns
        lines.append("")

    fields = {k.split("/", 1)[1]: v for k, v in c.items() if k.startswith("fields/")}
    if fields:
        lines += [
            "### What crossing the boundary costs, field by field (1 000 pods per call)",
            "",
            "| records | per pod |",
            "|---|---:|",
        ]
        for key, v in fields.items():
            per_pod = v["median_ns"] / (v["elements"] or 1)
            data["fields"][key] = per_pod
            lines.append(f"| `{key}` | {duration(per_pod)} |")
        zero, sixteen = fields.get("extra-labels/0"), fields.get("extra-labels/16")
        if zero and sixteen:
            per_label = (sixteen["median_ns"] - zero["median_ns"]) / 16 / (zero["elements"] or 1)
            data["fields"]["ns_per_extra_label_per_pod"] = per_label
            lines += ["", f"Each extra label (a key and a value) that crosses costs {duration(per_label)} per pod."]
        lines.append("")

    convert = {k.split("/", 1)[1]: v for k, v in c.items() if k.startswith("convert/")}
    if convert:
        lines += ["### Host-side conversion to WIT records", "", "| conversion | per item |", "|---|---:|"]
        for key, v in convert.items():
            per = v["median_ns"] / (v["elements"] or 1)
            data["convert"][key] = per
            lines.append(f"| `{key}` | {duration(per)} |")
        lines.append("")
    return lines, data


def controller_section(s: dict) -> list[str]:
    big, wide, lat, noop = (
        s["cold_start_one_service"],
        s["cold_start_many_services"],
        s["event_latency"],
        s["no_op_changes"],
    )
    pod_ev, write_ev = lat["pod_event_to_slice_event"], lat["status_write_response_to_slice_event"]
    return [
        "### Cold start: controller start until every slice is correct",
        "",
        "| scenario | pods | time | slice writes | controller CPU | peak RSS |",
        "|---|---:|---:|---:|---:|---:|",
        f"| 1 Service x {big['pods']:,} pods | {big['pods']:,} | {big['seconds_to_correct_slices']:.2f} s | "
        f"{big['slice_writes']} | {big['cost']['cpu_seconds']:.2f} s | {big['cost']['peak_rss_mib']:.1f} MiB |",
        f"| {wide['services']} Services x {wide['pods'] // wide['services']} pods | {wide['pods']:,} | "
        f"{wide['seconds_to_correct_slices']:.2f} s | {wide['slice_writes']} | "
        f"{wide['cost_after_cold_start']['cpu_seconds']:.2f} s | {wide['cost_after_cold_start']['peak_rss_mib']:.1f} MiB |",
        "",
        f"### Event latency: {lat['flips']} Ready flips, {lat['pods_cached']:,} pods cached",
        "",
        "From the pod's watch event (the status write as every watcher sees it) to the watch event",
        "of the EndpointSlice that shows the new condition; both watched by the benchmark.",
        "",
        "| measured from | p50 | p95 | p99 | max |",
        "|---|---:|---:|---:|---:|",
        f"| pod watch event | {pod_ev['p50_ms']:.1f} ms | {pod_ev['p95_ms']:.1f} ms | {pod_ev['p99_ms']:.1f} ms | {pod_ev['max_ms']:.1f} ms |",
        f"| status write's response | {write_ev['p50_ms']:.1f} ms | {write_ev['p95_ms']:.1f} ms | {write_ev['p99_ms']:.1f} ms | {write_ev['max_ms']:.1f} ms |",
        "",
        *reconcile_lines(lat),
        "### API writes per event",
        "",
        "| change | count | controller's `endpointslice_writes_total` | API server's `apiserver_request_total` (endpointslices, writes) |",
        "|---|---:|---:|---:|",
        f"| Ready flip (moves one endpoint) | {lat['flips']} | {lat['writes_per_flip']['controller_metric']:.2f} per flip | "
        f"{lat['writes_per_flip']['apiserver_request_total']:.2f} per flip |",
        f"| pod label and Service annotation no policy reads (moves none) | "
        f"{noop['pod_label_changes'] + noop['service_annotation_changes']} ({noop['reconciles']} reconciles) | "
        f"{noop['writes']['controller_metric']} | {noop['writes']['apiserver_request_total']} |",
        "",
        *churn_lines(s),
        "### Cost of the 10 000-pod run (cold start, flips, no-op changes)",
        "",
        f"Peak RSS {wide['cost']['peak_rss_mib']:.1f} MiB (RSS at the end {wide['cost']['rss_mib']:.1f} MiB), "
        f"{wide['cost']['cpu_seconds']:.2f} CPU seconds over {wide['cost']['wall_seconds']:.0f} s.",
        "",
    ]


def reconcile_lines(lat: dict) -> list[str]:
    if "reconcile_ms_mean" not in lat:
        return []
    return [
        f"Inside the controller, the flips cost {lat['reconciles_per_flip']:.2f} reconciles each, of "
        f"{lat['reconcile_ms_mean']:.1f} ms on average (`reconcile_duration_seconds`: from the "
        "reconcile's start to its last write's answer); the rest is the queue, the API server and the watches.",
        "",
    ]


# The figures of the design before the reconcile core was rebuilt around the pod index
# (BENCHMARKS.md of 2026-11-30, same machine and scenarios), shown beside today's.
BEFORE = {
    "flip": "p50 82 ms, p99 110 ms",
    "churn": "up to 3 (later slices shift)",
    "writes": "1.00 / 0",
    "rss": "162 MiB",
    "cold": "13.0 s",
    "evaluated": "every candidate of the Service (10 000)",
    "plugin": "815 ns",
}


def envelope_section(e: dict) -> list[str]:
    cold, flips = e["cold_start"], e["flips"]
    ours, api = flips["pod_event_to_slice_event"], flips["apiserver_status_write_to_pod_event"]
    per_network = cold["services"] // cold["networks"]
    return [
        f"## Scalability envelope: {cold['pods']:,} pods, {cold['services']:,} Services "
        f"(`make bench-scale`, run on {e.get('date', '?')})",
        "",
        f"{cold['services']:,} headless Services of {e['pods_per_service']} pods each on {cold['networks']} networks "
        f"({per_network} Services per network, so each Service's policy sees "
        f"{per_network * e['pods_per_service']:,} candidates), one namespace, on the local control plane.",
        f"Setting up the pods took {e['setup_seconds']:.0f} s (not part of any figure).",
        "",
        "| figure | measured |",
        "|---|---:|",
        f"| cold start: controller start until every Service's slice is correct | {cold['seconds_to_correct_slices']:.1f} s |",
        f"| slice writes during the cold start | {cold['slice_writes']:,} |",
        f"| the API server's own mean time per slice write (cold start) | {cold['apiserver_ms_per_slice_write']:.1f} ms |",
        f"| Ready flip, pod watch event → slice watch event ({flips['flips']} flips) | "
        f"p50 {ours['p50_ms']:.1f} ms, p99 {ours['p99_ms']:.1f} ms, max {ours['max_ms']:.1f} ms |",
        f"| the API server's floor: status write sent → its pod watch event | "
        f"p50 {api['p50_ms']:.1f} ms, p99 {api['p99_ms']:.1f} ms |",
        f"| the API server's own mean time per slice write (flips) | {flips['apiserver_ms_per_slice_write']:.1f} ms |",
        f"| slice writes per flip (controller / API server) | {flips['writes_per_flip']['controller_metric']:.2f} / "
        f"{flips['writes_per_flip']['apiserver_request_total']:.2f} |",
        f"| controller CPU: cold start / whole run | {cold['cost']['cpu_seconds']:.1f} s / {e['cost']['cpu_seconds']:.1f} s |",
        *control_plane_row(cold),
        f"| controller peak RSS | {e['cost']['peak_rss_mib']:.0f} MiB |",
        "",
    ]


def control_plane_row(cold: dict) -> list[str]:
    cpu = cold.get("control_plane_cpu_seconds") or {}
    if not cpu:
        return []
    parts = " / ".join(f"{cpu[n]:.1f} s" for n in ("kube-apiserver", "etcd", "kube-controller-manager") if n in cpu)
    return [f"| the control plane's CPU during the cold start: kube-apiserver / etcd / kube-controller-manager | {parts} |"]


def envelope_targets(e: dict) -> list[dict]:
    cold, lat = e["cold_start"], e["flips"]["pod_event_to_slice_event"]
    scale = f"{cold['pods']:,} pods, {cold['services']:,} Services"
    return [
        {"target": f"envelope cold start <= 60 s, {scale}", "before": "",
         "measured": f"{cold['seconds_to_correct_slices']:.1f} s", "met": cold["seconds_to_correct_slices"] <= 60},
        {"target": f"envelope Ready flip p99 <= 50 ms, {scale}", "before": "",
         "measured": f"p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms", "met": lat["p99_ms"] <= 50},
        {"target": f"envelope peak RSS <= 400 MiB, {scale}", "before": "",
         "measured": f"{e['cost']['peak_rss_mib']:.0f} MiB", "met": e["cost"]["peak_rss_mib"] <= 400},
    ]


def churn_lines(s: dict) -> list[str]:
    if "churn" not in s:
        return []
    c = s["churn"]
    return [
        f"### Pods joining and leaving a {c['pods']}-pod Service",
        "",
        f"{c['moves']} pods, one at a time, each by a relabel (one change) and with a name that sorts",
        "between the Service's pods: with slices cut from a sorted list, every later slice shifted.",
        "",
        "| change | controller's `endpointslice_writes_total` | API server's writes |",
        "|---|---:|---:|",
        f"| pod added | {c['added']['controller_metric']:.2f} per pod | {c['added']['apiserver_request_total']:.2f} per pod |",
        f"| pod removed | {c['removed']['controller_metric']:.2f} per pod | {c['removed']['apiserver_request_total']:.2f} per pod |",
        "",
    ]


def targets(plugin: dict, s: dict | None) -> list[dict]:
    rows = []
    at_1000 = next((r for r in plugin.get("evaluate", []) if r["pods"] == 1000), None)
    if at_1000:
        rows.append({
            "target": "plugin cost per pod at 1 000 pods <= 1 µs",
            "before": BEFORE["plugin"],
            "measured": f"{at_1000['wasm_ns_per_pod']:.0f} ns per pod"
            + (f" ({at_1000['ratio']:.0f}x native)" if "ratio" in at_1000 else ""),
            "met": at_1000["wasm_ns_per_pod"] <= 1000,
        })
    if not s:
        return rows
    lat = s["event_latency"]["pod_event_to_slice_event"]
    rows.append({
        "target": f"Ready flip → slice, {s['event_latency']['pods_cached']:,} pods, "
        f"{s['cold_start_many_services']['services']} Services on one network: p50 <= 10 ms, p99 <= 25 ms",
        "before": BEFORE["flip"],
        "measured": f"p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms",
        "met": lat["p50_ms"] <= 10 and lat["p99_ms"] <= 25,
    })
    if "churn" in s:
        c = s["churn"]
        added, removed = c["added"]["controller_metric"], c["removed"]["controller_metric"]
        rows.append({
            "target": f"slice writes per pod added / removed in a {c['pods']}-pod Service = 1.00",
            "before": BEFORE["churn"],
            "measured": f"{added:.2f} / {removed:.2f} (API server: "
            f"{c['added']['apiserver_request_total']:.2f} / {c['removed']['apiserver_request_total']:.2f})",
            "met": abs(added - 1) < 1e-9 and abs(removed - 1) < 1e-9,
        })
    f = s["event_latency"]["writes_per_flip"]
    w = s["no_op_changes"]["writes"]
    rows.append({
        "target": "writes per flip / per change that moves no endpoint = 1.00 / 0",
        "before": BEFORE["writes"],
        "measured": f"{f['controller_metric']:.2f} / {w['controller_metric']} (API server: "
        f"{f['apiserver_request_total']:.2f} / {w['apiserver_request_total']})",
        "met": abs(f["controller_metric"] - 1) < 1e-9 and abs(f["apiserver_request_total"] - 1) < 1e-9
        and w["controller_metric"] == 0 and w["apiserver_request_total"] == 0,
    })
    rss = s["cold_start_many_services"]["cost"]["peak_rss_mib"]
    rows.append({
        "target": f"peak RSS <= 48 MiB, {s['cold_start_many_services']['pods']:,} pods",
        "before": BEFORE["rss"],
        "measured": f"{rss:.1f} MiB",
        "met": rss <= 48,
    })
    wide = s["cold_start_many_services"]
    rows.append({
        "target": f"cold start <= 2 s, {wide['services']} Services x {wide['pods'] // wide['services']} pods",
        "before": BEFORE["cold"],
        "measured": f"{wide['seconds_to_correct_slices']:.2f} s",
        "met": wide["seconds_to_correct_slices"] <= 2,
    })
    ev = s["event_latency"].get("evaluated_pods_per_flip")
    if ev:
        rows.append({
            "target": "pods evaluated per Ready flip (default plugin): the changed pod",
            "before": BEFORE["evaluated"],
            "measured": f"{ev['per_service']:.2f} per Service ({ev['all_services']:.0f} over the "
            f"{ev['services_on_the_network']} Services on the network)",
            "met": ev["per_service"] <= 1.0 + 1e-9,
        })
    return rows


def prober_targets(p: dict) -> list[dict]:
    return [{
        "target": f"network prober: writes per 1 000 probes while nothing changes = 0 "
        f"({p['pods']} pods x {p['ports']} ports, every {p['period_seconds']} s)",
        "before": "",
        "measured": f"{p['writes_per_1000_probes']:.3f} ({p['writes']} writes, {p['probes']:,} probes)",
        "met": p["writes"] == 0,
    }]


def prober_section(p: dict) -> list[str]:
    def ms(seconds):
        return "?" if seconds is None else f"<= {seconds * 1000:.1f} ms"
    return [
        "## Network prober (the release binary on the local data plane)",
        "",
        f"One prober (`nad-service-controller probe`) in a node's network namespace, probing "
        f"{p['pods']} pods x {p['ports']} ports (a TCP connect each) every "
        f"{p['period_seconds']} s, measured over {p['window_seconds']:.0f} s of steady state "
        "(every pod already marked ready); hack/bench/prober.sh.",
        "",
        "| figure | value |",
        "|---|---:|",
        f"| probes per second (a probe: every port of a pod) | {p['probes_per_second']:.1f} |",
        f"| TCP connects per second | {p['connects_per_second']:.1f} |",
        f"| failed probes | {p['failures']} |",
        f"| CPU | {p['cpu_cores'] * 100:.1f} % of one core |",
        f"| RSS / peak RSS | {p['rss_mib']:.1f} MiB / {p['peak_rss_mib']:.1f} MiB |",
        f"| probe latency p50 / p99 (histogram bucket bounds) | {ms(p['probe_p50_seconds'])} / {ms(p['probe_p99_seconds'])} |",
        f"| condition writes / per 1 000 probes | {p['writes']} / {p['writes_per_1000_probes']:.3f} |",
        "",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--criterion", type=Path)
    parser.add_argument("--scale", type=Path)
    parser.add_argument("--envelope", type=Path, default=ROOT / "hack" / "bench" / "envelope.json")
    parser.add_argument("--prober", type=Path)
    parser.add_argument("--markdown", type=Path, default=ROOT / "BENCHMARKS.md")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks.json")
    args = parser.parse_args()

    last = json.loads(args.json.read_text()) if args.json.exists() else {}
    if args.criterion:
        criterion = criterion_results(args.criterion)
    else:
        criterion = last.get("plugin_boundary", {}).get("criterion", {})
    if not criterion:
        print(f"report: no Criterion results (--criterion {args.criterion}, or {args.json})", file=sys.stderr)
        return 1
    if args.scale:
        scale = json.loads(args.scale.read_text()) if args.scale.exists() else None
    else:
        scale = last.get("controller")
    envelope = json.loads(args.envelope.read_text()) if args.envelope.exists() else None
    if args.prober:
        prober = json.loads(args.prober.read_text()) if args.prober.exists() else None
    else:
        prober = last.get("prober")
    machine = (scale or {}).get("machine") or {}
    plugin_lines, plugin = plugin_section(criterion)
    rows = targets(plugin, scale) + (envelope_targets(envelope) if envelope else [])
    rows += prober_targets(prober) if prober else []

    md = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (hack/bench.sh); do not edit by hand: the analysis at the end",
        "comes from `hack/bench/analysis.md`. Absolute times hold for this machine only; ratios",
        "and counts travel.",
        "",
        f"Machine: {machine.get('cores', '?')} cores ({machine.get('cpu', 'unknown CPU')}), "
        f"{machine.get('memory_gib', '?')} GiB of memory. Kubernetes {(scale or {}).get('kubernetes', '?')} "
        f"(the local control plane). Run on {datetime.date.today().isoformat()}.",
        "",
        "## Targets",
        "",
        "| target | before the rebuild | measured | met |",
        "|---|---|---|---|",
    ]
    md += [
        f"| {r['target']} | {r.get('before', '')} | {r['measured']} | {'yes' if r['met'] else '**no**'} |"
        for r in rows
    ]
    md += ["", "## Plugin boundary (Criterion: median of the samples)", ""] + plugin_lines
    if scale:
        md += [
            "## Controller at scale (real local control plane, node simulator, the controller binary)",
            "",
            f"Setting up the pods took {scale['setup_seconds']:.0f} s (not part of any figure).",
            "",
        ] + controller_section(scale)
    if envelope:
        md += envelope_section(envelope)
    if prober:
        md += prober_section(prober)
    analysis = ROOT / "hack" / "bench" / "analysis.md"
    if analysis.exists():
        md += [analysis.read_text().rstrip(), ""]
    args.markdown.write_text("\n".join(md))
    args.json.write_text(json.dumps({
        "machine": machine,
        "targets": rows,
        "plugin_boundary": {"criterion": criterion, **plugin},
        "controller": scale,
        "envelope": envelope,
        "prober": prober,
    }, indent=2, ensure_ascii=False) + "\n")
    print(f"report: wrote {args.markdown} and {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
