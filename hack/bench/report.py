#!/usr/bin/env python3
"""Turns the benchmarks' raw results into BENCHMARKS.md and benchmarks.json.

Inputs: Criterion's estimates (<target>/criterion/**/new/{benchmark,estimates}.json) from
host/benches/plugin_boundary.rs, the JSON that host/benches/controller_scale.rs and
host/benches/slice_writes.rs write, and
the scalability envelope's (host/benches/controller_envelope.rs, `make bench-scale`), kept in
hack/bench/envelope.json because that run takes long and `make bench` does not repeat it.
Without --criterion and --scale, those parts come from the benchmarks.json written last.
Each target is shown beside the previous run's figure: the committed benchmarks.json
(`git show HEAD:benchmarks.json`), or --previous.
The analysis of the figures (hack/bench/analysis.md, written by people) is appended as is.
Standard library only.
"""
import argparse
import datetime
import json
import subprocess
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

    pulls = {k.split("/", 1)[1]: v["median_ns"] for k, v in c.items() if k.startswith("pull/")}
    if pulls:
        lines += [
            "### Pulling a plugin artifact (registry on loopback, no cache)",
            "",
            "One `Puller::pull`: manifest, checks, layer, digest; `verified` adds the signature",
            "check against a policy of one public key (cosign, `.sig` tag).",
            "",
            "| artifact | unchecked | verified | the check's share |",
            "|---|---:|---:|---:|",
        ]
        data["pull"] = pulls
        for name, label in [("default", "the default plugin (70 KB)"), ("15mib", "15 MiB")]:
            plain, checked = pulls.get(f"unchecked/{name}"), pulls.get(f"verified/{name}")
            if plain and checked:
                lines.append(
                    f"| {label} | {duration(plain)} | {duration(checked)} | {duration(checked - plain)} |"
                )
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
        *own_share_lines(lat),
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


def ms_row(label: str, d: dict) -> str:
    return f"| {label} | {d['p50_ms']:.1f} ms | {d['p95_ms']:.1f} ms | {d['p99_ms']:.1f} ms | {d['max_ms']:.1f} ms |"


def own_share_lines(lat: dict) -> list[str]:
    if "controller_own_share" not in lat:
        return []
    return [
        "Where a flip's time goes, per flip of the same run: the API server's time from sending the",
        "pod's status write to its watch event, and the rest (the flip's latency less that time, at",
        "least 0): the controller's own share, since its slice write costs the API server about as much.",
        "",
        "| per flip | p50 | p95 | p99 | max |",
        "|---|---:|---:|---:|---:|",
        ms_row("flip latency: pod watch event → slice watch event", lat["pod_event_to_slice_event"]),
        ms_row("API server: status write sent → pod watch event", lat["apiserver_status_write_to_pod_event"]),
        ms_row("the controller's own share", lat["controller_own_share"]),
        "",
    ] + write_time_lines(lat)


def write_time_lines(lat: dict) -> list[str]:
    per = lat.get("apiserver_ms_per_write")
    if not per:
        return []
    extra = per["slice"] - per["pod_status"]
    return [
        "The API server's own time per request during the flips (`apiserver_request_duration_seconds`): "
        f"{per['slice']:.1f} ms for a slice write (this controller's), "
        f"{per['pod_status']:.1f} ms for a pod status write. The slice write's {extra:.1f} ms more is in the "
        f"own share above; less it, the own share is {lat['controller_own_share']['p50_ms'] - extra:.1f} ms at p50.",
        "",
    ]


WRITE_KINDS = (
    ("create", "create (a new slice)"),
    ("change", "change (one endpoint's conditions flip)"),
    ("repair", "repair (a hand edit undone)"),
)


def writes_section(w: dict) -> list[str]:
    """host/benches/slice_writes.rs: server-side apply against create/update, per write."""
    cases = {(c["way"], c["endpoints"]): c for c in w["cases"]}
    sizes = sorted({c["endpoints"] for c in w["cases"]})
    # (size, apply's case, update's case) for each size measured both ways.
    pairs = [(size, cases[("apply", size)], cases[("update", size)]) for size in sizes
             if ("apply", size) in cases and ("update", size) in cases]
    lines = [
        "## What one slice write costs the API server: server-side apply against create/update",
        "",
        f"host/benches/slice_writes.rs: a plain client writes slices one at a time, {w['writes_per_case']} "
        "writes of each kind by each way, the two ways' writes in turn, on the local control plane; "
        "nothing else writes slices meanwhile. *apply*: server-side apply (a create without force, "
        "later writes forced at the `resourceVersion` seen), as this controller wrote before issue 46; "
        "*update*: `POST`, then `PUT` at the `resourceVersion` seen, as Kubernetes' EndpointSlice "
        "controller writes and this controller now does. API server: its own mean time "
        "(`apiserver_request_duration_seconds` of the way's verb); etcd: what it stores for the slice "
        "after the write (the object's protobuf encoding, `managedFields` included), which each write "
        f"puts whole. Commit measured: `{w.get('commit', '?')}`.",
        "",
        "| slice | write | API server: apply | update | update / apply | round trip p50: apply | update | etcd bytes: apply | update |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, apply, update in pairs:
        for kind, label in WRITE_KINDS:
            a, u = apply[kind], update[kind]
            lines.append(
                f"| {size} endpoints | {label} | {a['api_ms']:.2f} ms | {u['api_ms']:.2f} ms | "
                f"{u['api_ms'] / a['api_ms']:.2f} | {a['round_trip_p50_ms']:.2f} ms | "
                f"{u['round_trip_p50_ms']:.2f} ms | {a['stored_bytes']:,} | {u['stored_bytes']:,} |")
    lines += [
        "",
        "The stored slice as the API returns it (JSON, `managedFields` included), after its create, "
        "change, hand edit and repair:",
        "",
        "| slice | apply: object | its managedFields | update: object | its managedFields |",
        "|---|---:|---:|---:|---:|",
    ]
    for size, apply, update in pairs:
        lines.append(
            f"| {size} endpoints | {apply['stored_json_bytes']:,} B | {apply['managed_fields_json_bytes']:,} B | "
            f"{update['stored_json_bytes']:,} B | {update['managed_fields_json_bytes']:,} B |")
    return lines + [""]


def side_by_side_section(s: dict) -> list[str]:
    side = s.get("side_by_side")
    if not side:
        return []
    cold = side["services_created_to_slices_correct"]
    ours, kcm = cold["ours"], cold["kube_controller_manager"]
    flips, ratio = side["flips"], side["ours_over_kube_controller_manager"]
    return [
        "### Side by side with kube-controller-manager's EndpointSlice controller",
        "",
        f"The same {side['pods']:,} pods: {side['services']} ordinary selector Services (`kcm-svc-NNN`, primary",
        f"network) beside {side['services']} of ours, on the controller of the 10 000-pod run (running and synced).",
        "\"Services created → slices correct\": from the first of the Services' creates (16 at a time) until",
        "that controller's slices show every Service's Ready pods, from a slice watch; ours measured first",
        "(then removed), kube-controller-manager's second. The flips: one pod at a time, selected by one",
        "Service of each, timed from the pod's watch event to each controller's slice's; at most one flip",
        f"per {flips['min_period_ms']:.0f} ms, under kube-controller-manager's client rate limit.",
        "",
        *kcm_flag_lines(side),
        "",
        "| figure | ours | kube-controller-manager | ours / theirs |",
        "|---|---:|---:|---:|",
        f"| Services created → slices correct ({side['services']} x {side['pods'] // side['services']} pods) | "
        f"{ours['seconds_to_correct_slices']:.2f} s | {kcm['seconds_to_correct_slices']:.2f} s | "
        f"{ratio['services_created_to_slices_correct']:.2f} |",
        f"| CPU meanwhile (kube-controller-manager: the whole process) | {ours['cpu_seconds']:.2f} s | "
        f"{kcm['cpu_seconds']:.2f} s | |",
        f"| slice writes (API server) | {ours['slice_writes']} | {kcm['slice_writes']} | |",
        f"| Ready flip p50 ({flips['flips']} flips) | {flips['ours']['p50_ms']:.1f} ms | "
        f"{flips['kube_controller_manager']['p50_ms']:.1f} ms | {ratio['flip_p50']:.2f} |",
        f"| Ready flip p95 | {flips['ours']['p95_ms']:.1f} ms | {flips['kube_controller_manager']['p95_ms']:.1f} ms | "
        f"{flips['ours']['p95_ms'] / flips['kube_controller_manager']['p95_ms']:.2f} |",
        f"| Ready flip p99 | {flips['ours']['p99_ms']:.1f} ms | {flips['kube_controller_manager']['p99_ms']:.1f} ms | "
        f"{ratio['flip_p99']:.2f} |",
        "",
        f"The API server's time from a flip's status write to its pod watch event, in these flips: "
        f"p50 {flips['apiserver_status_write_to_pod_event']['p50_ms']:.1f} ms, "
        f"p99 {flips['apiserver_status_write_to_pod_event']['p99_ms']:.1f} ms.",
        "",
    ]


# kube-controller-manager's defaults (v1.37) for the flags that shape its EndpointSlice controller.
KCM_DEFAULTS = {
    "--endpointslice-updates-batch-period": "0s",
    "--concurrent-service-endpoint-syncs": "5",
    "--max-endpoints-per-slice": "100",
    "--kube-api-qps": "20",
    "--kube-api-burst": "30",
}


def kcm_settings(flags: list[str]) -> dict:
    """Each flag of KCM_DEFAULTS: (its value, whether it is the default), from the command line."""
    given = dict(f.split("=", 1) for f in flags if "=" in f)
    return {name: (given.get(name, default), name not in given) for name, default in KCM_DEFAULTS.items()}


def kcm_flag_lines(side: dict) -> list[str]:
    flags = side.get("kube_controller_manager_flags") or []
    settings = kcm_settings(flags)
    shown = ", ".join(f"`{name}={value}`" + (" (default)" if default else "")
                      for name, (value, default) in settings.items())
    writes = side["services_created_to_slices_correct"]["kube_controller_manager"]["slice_writes"]
    qps, burst = float(settings["--kube-api-qps"][0]), float(settings["--kube-api-burst"][0])
    batch = settings["--endpointslice-updates-batch-period"][0]
    return [
        "kube-controller-manager runs with " + (", ".join(f"`{f}`" for f in flags) or "no flags recorded")
        + f" (hack/local-up.sh); for its EndpointSlice controller that means {shown}.",
        "No batching: each change is written at once." if batch in ("0", "0s") else
        f"Changes are batched for {batch} before they are written.",
        f"Its client's rate limit alone makes {writes} slice writes take at least "
        f"{max(0.0, (writes - burst) / qps):.2f} s ({burst:.0f} at once, then {qps:.0f} a second).",
    ]


def side_by_side_targets(s: dict) -> list[dict]:
    side = s.get("side_by_side")
    if not side:
        return []
    cold = side["services_created_to_slices_correct"]
    flips, ratio = side["flips"], side["ours_over_kube_controller_manager"]
    scale = f"{side['services']} Services x {side['pods'] // side['services']} pods"
    rows = []
    for key, label in (("flip_p50", "p50"), ("flip_p99", "p99")):
        pct = label + "_ms"
        rows.append({
            "id": f"kcm_{key}",
            "target": f"Ready flip {label}, side by side with kube-controller-manager ({scale}): ours <= 1.0 x theirs",
            "measured": f"{flips['ours'][pct]:.1f} ms vs {flips['kube_controller_manager'][pct]:.1f} ms ({ratio[key]:.2f}x)",
            "met": ratio[key] <= 1.0,
        })
    r = ratio["services_created_to_slices_correct"]
    rows.append({
        "id": "kcm_services_created",
        "target": f"Services created → slices correct, side by side with kube-controller-manager ({scale}): "
        "ours <= 1.0 x theirs",
        "measured": f"{cold['ours']['seconds_to_correct_slices']:.2f} s vs "
        f"{cold['kube_controller_manager']['seconds_to_correct_slices']:.2f} s ({r:.2f}x)",
        "met": r <= 1.0,
    })
    return rows


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
        *plain_client_rows(e),
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


def claims_section(c: dict) -> list[str]:
    claims, multus = c["claims"], c["multus"]
    cold = claims["cold_start"]

    def flip(run: dict) -> str:
        lat = run["flips"]["pod_event_to_slice_event"]
        return f"p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms"

    def row(what: str, get) -> str:
        return f"| {what} | {get(multus)} | {get(claims)} |"

    extra_mib = claims["cost"]["peak_rss_mib"] - multus["cost"]["peak_rss_mib"]
    return [
        f"## The claim variant: addresses from ResourceClaims ({cold['pods']:,} pods, {cold['services']:,} Services, "
        f"`NSC_BENCH_VARIANT=claims make bench-scale`, commit `{claims.get('commit', '?')}`, run on {claims.get('date', '?')})",
        "",
        f"The envelope's shape at {cold['pods']:,} pods ({cold['services']:,} Services of {claims['pods_per_service']} pods "
        f"on {cold['networks']} networks), run twice on the same control plane, one after the other: the pods' "
        "addresses from one ResourceClaim each (allocated, reserved for the pod, its status as DRANET writes it; the "
        "Services on DeviceClasses), then from Multus' `network-status` (the Services on NetworkAttachmentDefinitions).",
        "",
        "| figure | Multus | claims |",
        "|---|---:|---:|",
        row("cold start: controller start until every Service's slice is correct",
            lambda r: f"{r['cold_start']['seconds_to_correct_slices']:.1f} s"),
        row("slice writes during the cold start", lambda r: f"{r['cold_start']['slice_writes']:,}"),
        row(f"Ready flip, pod watch event → slice watch event ({claims['flips']['flips']} flips)", flip),
        row("slice writes per flip (controller)",
            lambda r: f"{r['flips']['writes_per_flip']['controller_metric']:.2f}"),
        row("controller CPU, whole run", lambda r: f"{r['cost']['cpu_seconds']:.1f} s"),
        row("controller peak RSS", lambda r: f"{r['cost']['peak_rss_mib']:.0f} MiB"),
        "",
        f"The claims' run holds {cold['pods']:,} claims beside the pods: {extra_mib:+.0f} MiB of peak RSS against "
        f"Multus, {extra_mib * 1024 * 1024 / cold['pods']:+.0f} bytes a pod and its claim (the heap per cached claim, "
        "counted exactly, is in the heap section above).",
        "",
    ]


def plain_client_rows(e: dict) -> list[str]:
    plain = e.get("plain_client_writes")
    if not plain:
        return []
    return [
        f"| the same {plain['slice_writes']:,} slice writes by a plain client ({plain['concurrency']} at a time, "
        f"as the controller's `--concurrent-syncs`; each a create, as the "
        f"controller's are), after the controller stopped | {plain['seconds']:.1f} s |",
        f"| the API server's own mean time per slice write (plain client) | {plain['apiserver_ms_per_slice_write']:.1f} ms |",
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
    plain = e.get("plain_client_writes")
    baseline = [] if not plain else [{
        "id": "envelope_cold_start_vs_plain_client",
        "target": f"envelope cold start <= 1.3 x the API's own time for the same writes "
        f"({plain['slice_writes']:,} slice creates by a plain client, {plain['concurrency']} at a time), {scale}",
        "before": "",
        "measured": f"{cold['seconds_to_correct_slices']:.1f} s vs {plain['seconds']:.1f} s "
        f"({cold['seconds_to_correct_slices'] / plain['seconds']:.2f}x)",
        "met": cold["seconds_to_correct_slices"] <= 1.3 * plain["seconds"],
    }]
    return [
        {"target": f"envelope cold start <= 60 s, {scale}", "before": "",
         "measured": f"{cold['seconds_to_correct_slices']:.1f} s", "met": cold["seconds_to_correct_slices"] <= 60},
        *baseline,
        {"target": f"envelope Ready flip p99 <= 50 ms, {scale}", "before": "",
         "measured": f"p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms", "met": lat["p99_ms"] <= 50},
        {"target": f"envelope peak RSS <= 200 MiB, {scale}", "before": "",
         "measured": f"{e['cost']['peak_rss_mib']:.0f} MiB", "met": e["cost"]["peak_rss_mib"] <= 200},
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
    own = s["event_latency"].get("controller_own_share")
    if own:
        api = s["event_latency"]["apiserver_status_write_to_pod_event"]
        rows.append({
            "id": "own_share",
            "target": "the controller's own share of a Ready flip (flip latency less the same flip's API "
            "write → watch time), 10 000 pods: p50 <= 3 ms, p99 <= 12 ms",
            "before": "",
            "measured": f"p50 {own['p50_ms']:.1f} ms, p99 {own['p99_ms']:.1f} ms (API write → watch: "
            f"p50 {api['p50_ms']:.1f} ms, p99 {api['p99_ms']:.1f} ms)",
            "met": own["p50_ms"] <= 3 and own["p99_ms"] <= 12,
        })
    per = s["event_latency"].get("apiserver_ms_per_write")
    if per:
        rows.append({
            "id": "apiserver_ms_per_slice_write",
            "target": "the API server's own time per slice write during the flips (100 endpoints a slice) "
            "<= 6 ms (about a pod status write)",
            "before": "",
            "measured": f"{per['slice']:.1f} ms (a pod status write: {per['pod_status']:.1f} ms)",
            "met": per["slice"] <= 6,
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
        "id": "peak_rss_10000",
        "target": f"peak RSS <= 64 MiB, {s['cold_start_many_services']['pods']:,} pods",
        "was": f"peak RSS <= 48 MiB, {s['cold_start_many_services']['pods']:,} pods",
        "before": BEFORE["rss"],
        "measured": f"{rss:.1f} MiB",
        "met": rss <= 64,
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
    return rows + side_by_side_targets(s)


def memory_targets(m: dict) -> list[dict]:
    return [{
        "id": "heap_per_pod",
        "target": f"heap per cached pod <= 300 B ({m['pods']:,} pods of the envelope's shape; dhat)",
        "before": "~1.5 KB (heaptrack, 15 000 pods)",
        "measured": f"{m['index_bytes_per_pod']:.0f} B in {m['index_blocks_per_pod']:.1f} blocks "
        f"(the shared observation: {m['observation_bytes_per_pod']:.0f} B more)",
        "met": m["index_bytes_per_pod"] <= 300,
    }]


def memory_section(m: dict) -> list[str]:
    return [
        "## Heap per cached pod (crates/core/benches/pod_memory.rs)",
        "",
        f"{m['pods']:,} pods of the envelope's shape on {m['networks']} networks, fed to the pod index as "
        "one relist, then each network observed once (the Services of a network share it). Bytes asked "
        "of the allocator, counted by `dhat`; glibc's headers and rounding add some 8 to 16 bytes a block.",
        "",
        "| what | bytes a pod | blocks a pod |",
        "|---|---:|---:|",
        f"| the pod index (records, names, the network sets) | {m['index_bytes_per_pod']:.0f} | {m['index_blocks_per_pod']:.1f} |",
        f"| the network's shared observation | {m['observation_bytes_per_pod']:.0f} | {m['observation_blocks_per_pod']:.1f} |",
        "",
    ] + claim_memory_rows(m) + slice_memory_rows(m)


def claim_memory_rows(m: dict) -> list[str]:
    if "claim_bytes_per_claim" not in m:
        return []
    return [
        f"Heap per cached claim: {m['claims']:,} pods of the claim variant's shape (no Multus annotations, one "
        "ResourceClaim each, allocated, reserved for the pod, its status as DRANET writes it), fed to the pod "
        "index as one relist, then their claims as the claims' relist. A claim's cost is its record, the "
        "index's maps and its pod's record made again with the device's attachment.",
        "",
        "| what | bytes | blocks |",
        "|---|---:|---:|",
        f"| the pod index, a pod naming its claim | {m['claim_pod_index_bytes_per_pod']:.0f} | {m['claim_pod_index_blocks_per_pod']:.1f} |",
        f"| a cached claim (record, maps, the pod's device attachment) | {m['claim_bytes_per_claim']:.0f} | {m['claim_blocks_per_claim']:.1f} |",
        "",
    ]


def slice_memory_rows(m: dict) -> list[str]:
    if "store_bytes_per_slice" not in m:
        return []
    return [
        f"Heap per cached slice: {m['slices']:,} slices of {m['endpoints_per_slice']} endpoints as the API "
        "server returns them, fed to the slice store (`crates/core/src/index/slices.rs`), then kept whole "
        "in a map (what a reflector store keeps, less its larger keys).",
        "",
        "| what | bytes a slice | blocks a slice |",
        "|---|---:|---:|",
        f"| the slice store (records) | {m['store_bytes_per_slice']:.0f} | {m['store_blocks_per_slice']:.1f} |",
        f"| kept whole | {m['whole_bytes_per_slice']:.0f} | {m['whole_blocks_per_slice']:.1f} |",
        "",
    ]


def prober_targets(p: dict) -> list[dict]:
    # A false positive is a healthy pod marked not ready on its network: a condition written
    # while nothing changes. A failed probe of a healthy pod is where one would start.
    return [{
        "target": f"network prober, healthy pods: false positives (condition writes) and failed "
        f"probes = 0 ({p['pods']} pods x {p['ports']} ports, every {p['period_seconds']} s, "
        f"{p['window_seconds']:.0f} s; NSC_BENCH_PROBER_SECONDS sets the window)",
        "before": "",
        "measured": f"{p['writes']} writes, {p['failures']} failed, of {p['probes']:,} probes "
        f"({p['writes_per_1000_probes']:.3f} writes per 1 000)",
        "met": p["writes"] == 0 and p["failures"] == 0,
    }]


def prober_section(p: dict) -> list[str]:
    def ms(seconds):
        return "?" if seconds is None else f"<= {seconds * 1000:.1f} ms"
    return [
        "## Network prober (the release binary on the local data plane)",
        "",
        f"One prober (`nad-network-prober`) in a node's network namespace, probing "
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


def git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout


def previous_run(path: Path | None, fallback: Path) -> tuple[dict, str]:
    """The run to compare with, and its commit: `path`, else the committed benchmarks.json, else
    `fallback` (the --json file, before it is overwritten). A run that did not record its commit
    is named by the commit that recorded it."""
    if path:
        text = path.read_text() if path.exists() else None
    else:
        text = git("show", "HEAD:benchmarks.json")
        if text is None and fallback.exists():
            text, path = fallback.read_text(), fallback
    if not text:
        return {}, ""
    previous = json.loads(text)
    commit = previous.get("commit") or (previous.get("controller") or {}).get("commit")
    if not commit:
        recorded = git("log", "-1", "--format=%h", "--", str(path or ROOT / "benchmarks.json"))
        commit = f"{recorded.strip()}, which recorded it" if recorded and recorded.strip() else "?"
    return previous, commit


def with_previous(rows: list[dict], previous: dict) -> list[dict]:
    """Each row with the previous run's figure for the same target (by id, else by its text)."""
    before = {r.get("id") or r["target"]: r for r in previous.get("targets", [])}
    by_text = {r["target"]: r for r in previous.get("targets", [])}
    for row in rows:
        match = (before.get(row.get("id") or row["target"]) or by_text.get(row["target"])
                 or by_text.get(row.get("was", "")))
        row["previous"] = match["measured"] if match else ""
    return rows


def header(scale: dict | None, envelope: dict | None, machine: dict) -> list[str]:
    commit = (scale or {}).get("commit", "?")
    lines = [
        f"Commit measured: `{commit}` (`make bench`)"
        + (f"; the envelope: `{envelope.get('commit', '?')}` (`make bench-scale`)" if envelope else "")
        + ". `-dirty`: the work tree had changes other than the report files.",
        "",
        f"Machine: {machine.get('cores', '?')} cores ({machine.get('cpu', 'unknown CPU')}), "
        f"{machine.get('memory_gib', '?')} GiB of memory. Kubernetes {(scale or {}).get('kubernetes', '?')} "
        f"(the local control plane). Run on {datetime.date.today().isoformat()}.",
    ]
    other = (envelope or {}).get("machine")
    if other and other != machine:
        lines[-1] += (f" The envelope ran on {other.get('cores', '?')} cores ({other.get('cpu', '?')}), "
                      f"{other.get('memory_gib', '?')} GiB.")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--criterion", type=Path)
    parser.add_argument("--scale", type=Path)
    parser.add_argument("--envelope", type=Path, default=ROOT / "hack" / "bench" / "envelope.json")
    parser.add_argument("--envelope-claims", type=Path,
                        default=ROOT / "hack" / "bench" / "envelope-claims.json")
    parser.add_argument("--prober", type=Path)
    parser.add_argument("--memory", type=Path, help="the pod memory benchmark's JSON")
    parser.add_argument("--writes", type=Path, help="the slice write benchmark's JSON")
    parser.add_argument("--markdown", type=Path, default=ROOT / "BENCHMARKS.md")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks.json")
    parser.add_argument("--previous", type=Path,
                        help="the benchmarks.json to compare with (default: the committed one)")
    args = parser.parse_args()

    last = json.loads(args.json.read_text()) if args.json.exists() else {}
    previous, previous_commit = previous_run(args.previous, args.json)
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
    claims = json.loads(args.envelope_claims.read_text()) if args.envelope_claims.exists() else None
    if args.prober:
        prober = json.loads(args.prober.read_text()) if args.prober.exists() else None
    else:
        prober = last.get("prober")
    if args.memory:
        memory = json.loads(args.memory.read_text()) if args.memory.exists() else None
    else:
        memory = last.get("memory")
    if args.writes:
        writes = json.loads(args.writes.read_text()) if args.writes.exists() else None
    else:
        writes = last.get("slice_writes")
    machine = (scale or {}).get("machine") or {}
    plugin_lines, plugin = plugin_section(criterion)
    rows = targets(plugin, scale) + (memory_targets(memory) if memory else [])
    rows += envelope_targets(envelope) if envelope else []
    rows += prober_targets(prober) if prober else []
    rows = with_previous(rows, previous)

    md = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (hack/bench.sh); do not edit by hand: the analysis at the end",
        "comes from `hack/bench/analysis.md`. Absolute times hold for this machine only; ratios",
        "and counts travel.",
        "",
        *header(scale, envelope, machine),
        "",
        "## Targets",
        "",
        f"| target | before the rebuild | measured | previous run (commit {previous_commit or '?'}) | met |",
        "|---|---|---|---|---|",
    ]
    md += [
        f"| {r['target']} | {r.get('before', '')} | {r['measured']} | {r['previous']} | {'yes' if r['met'] else '**no**'} |"
        for r in rows
    ]
    md += ["", "## Plugin boundary (Criterion: median of the samples)", ""] + plugin_lines
    if scale:
        md += [
            "## Controller at scale (real local control plane, node simulator, the controller binary)",
            "",
            f"Setting up the pods took {scale['setup_seconds']:.0f} s (not part of any figure).",
            "",
        ] + controller_section(scale) + side_by_side_section(scale)
    if writes:
        md += writes_section(writes)
    if memory:
        md += memory_section(memory)
    if envelope:
        md += envelope_section(envelope)
    if claims:
        md += claims_section(claims)
    if prober:
        md += prober_section(prober)
    analysis = ROOT / "hack" / "bench" / "analysis.md"
    if analysis.exists():
        md += [analysis.read_text().rstrip(), ""]
    args.markdown.write_text("\n".join(md))
    args.json.write_text(json.dumps({
        "commit": (scale or {}).get("commit"),
        "previous_commit": previous_commit,
        "machine": machine,
        "targets": rows,
        "plugin_boundary": {"criterion": criterion, **plugin},
        "controller": scale,
        "envelope": envelope,
        "envelope_claims": claims,
        "memory": memory,
        "slice_writes": writes,
        "prober": prober,
    }, indent=2, ensure_ascii=False) + "\n")
    print(f"report: wrote {args.markdown} and {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
