//! Pulling a plugin artifact, measured with Criterion: the CNCF distribution registry on loopback
//! (plain HTTP), no cache, each iteration a whole `Puller::pull` (manifest, checks, layer,
//! digest), unchecked and with a verification policy of one public key (cosign, built by
//! `hack/tools.sh cosign`, signed the artifacts offline). Part of `make bench`.
//!
//! | ID | the artifact |
//! |---|---|
//! | `pull/{unchecked,verified}/default` | the built-in default plugin (about 70 KB) |
//! | `pull/{unchecked,verified}/15mib` | a 15 MiB layer (the limit is 16 MiB) |

// Benchmarks may fail loudly: a broken setup must not produce figures.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "../tests/support/registry.rs"]
mod registry;

use std::{collections::BTreeMap, time::Duration};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nad_plugin_fetcher::{PUSH_LAYER_MEDIA_TYPE, Policy, Puller, Signer, Verifier};
use nad_plugin_runtime::DEFAULT_PLUGIN_WASM;
use registry::{Cosign, Registry, oci, puller};

fn pull(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let registry = Registry::start("bench-pull");
    let cosign = Cosign::new("bench-pull");
    let (key, public) = cosign.key("bench");
    let publisher = puller(&registry, None);
    // 15 MiB that no compression or deduplication shortens.
    let large: Vec<u8> = (0..15u32 * 1024 * 1024)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut artifacts = Vec::new();
    for (name, bytes) in [
        ("default", DEFAULT_PLUGIN_WASM),
        ("15mib", large.as_slice()),
    ] {
        let target = oci(&registry.reference(&format!("bench/{name}:1")));
        let digest = runtime
            .block_on(publisher.push(&target, bytes, PUSH_LAYER_MEDIA_TYPE, BTreeMap::new()))
            .unwrap();
        cosign.sign(&key, &format!("{}/bench/{name}@{digest}", registry.host));
        let pinned = oci(&format!(
            "{}@{digest}",
            registry.reference(&format!("bench/{name}"))
        ));
        artifacts.push((name, bytes.len(), pinned));
    }
    let unchecked = puller(&registry, None);
    let verified = puller(&registry, None);
    let policy = Policy {
        all_of: vec![Signer::PublicKey(public)],
        ..Policy::default()
    };
    verified
        .set_policy(Some(Verifier::new("bench", &policy).unwrap()))
        .unwrap();

    let mut group = c.benchmark_group("pull");
    group.sample_size(20);
    for (mode, puller) in [("unchecked", &unchecked), ("verified", &verified)] {
        for (name, size, reference) in &artifacts {
            group.throughput(Throughput::Bytes(*size as u64));
            group.bench_function(format!("{mode}/{name}"), |b| {
                b.iter(|| {
                    let pulled: &Puller = puller;
                    let got = runtime.block_on(pulled.pull(reference)).unwrap();
                    assert_eq!(got.component.len(), *size);
                });
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    targets = pull
}
criterion_main!(benches);
