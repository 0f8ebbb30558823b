//! The default policy run natively on the host's WIT records: the baseline of the plugin
//! boundary's benchmark, and a check that the Wasm plugin decides as its own source says.
//!
//! Nothing here is a copy of the policy: the records are converted to the guest SDK's (both
//! are generated from `wit/nad-endpoints.wit`), the default plugin's own [`policy`] decides,
//! and its decisions are converted back. The conversions are exhaustive, so a change of the
//! WIT records fails to compile here instead of measuring something else.
//!
//! A benchmark that times the policy alone converts once, outside its timed loop:
//!
//! ```
//! use nad_test_kit::{native, wit::{pod, service}};
//!
//! let pods = [pod("web-0").label("app", "web").build()];
//! let prepared = native::prepare(&service("web").label("app", "web").build(), &pods);
//! // Timed: the policy on the policy's own records.
//! let decisions = native::evaluate_prepared(&prepared, "").unwrap();
//! // Not timed: back to the host's records, to compare with the plugin's.
//! assert_eq!(native::to_wit(decisions).len(), 1);
//! ```

/// The default plugin's own policy, compiled from its source: the plugin crate builds a
/// component (a cdylib) only, which no crate can depend on.
#[path = "../../../plugins/default/src/policy.rs"]
#[allow(dead_code)] // the kit runs `evaluate`, not the plugin's other exports
mod policy;
use nad_plugin_runtime::wit;
use nad_plugin_sdk as sdk;

/// A Service and its pods converted to the policy's own records, with what the
/// `network-readiness` import would give for them: everything [`evaluate_prepared`] needs, so
/// that it runs the policy and nothing else.
#[derive(Debug, Clone)]
pub struct Prepared {
    service: sdk::Service,
    pods: Vec<sdk::Pod>,
    network: Vec<Option<sdk::PodCondition>>,
}

impl Prepared {
    /// How many pods it holds.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// Whether it holds no pod.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

/// Converts `service` and `pods` to the policy's records, once.
///
/// The network-readiness import does not exist natively: each pod gets what the plugin gets
/// from it when the host passes no conditions (no network prober), no condition at all.
pub fn prepare(service: &wit::Service, pods: &[wit::Pod]) -> Prepared {
    Prepared {
        service: to_sdk_service(service),
        pods: to_sdk_pods(pods),
        network: vec![None; pods.len()],
    }
}

/// What the default plugin's `evaluate` does, on records converted by [`prepare`]: it checks
/// `config`, then decides each pod with [`policy::evaluate`], and makes the summary line the
/// plugin logs (which is dropped here: `log` is a host import).
pub fn evaluate_prepared(prepared: &Prepared, config: &str) -> Result<Vec<sdk::Decision>, String> {
    let decisions = policy::evaluate(&prepared.service, &prepared.pods, &prepared.network, config)?;
    std::hint::black_box(policy::summary(&decisions));
    Ok(decisions)
}

/// The default plugin's answer to `evaluate(service, pods, config)`, decided natively:
/// [`prepare`], [`evaluate_prepared`] and [`to_wit`] in one. As there, no pod has a network
/// readiness condition (what a call without conditions gives the plugin).
pub fn evaluate(
    service: &wit::Service,
    pods: &[wit::Pod],
    config: &str,
) -> Result<Vec<wit::Decision>, String> {
    evaluate_prepared(&prepare(service, pods), config).map(to_wit)
}

/// The policy's decisions as the host's records.
pub fn to_wit(decisions: Vec<sdk::Decision>) -> Vec<wit::Decision> {
    decisions.into_iter().map(to_wit_decision).collect()
}

/// The host's pod records as the policy's.
pub fn to_sdk_pods(pods: &[wit::Pod]) -> Vec<sdk::Pod> {
    pods.iter().map(to_sdk_pod).collect()
}

/// The host's Service record as the policy's.
pub fn to_sdk_service(service: &wit::Service) -> sdk::Service {
    let wit::Service {
        name,
        namespace,
        labels,
        annotations,
        ports,
        publish_not_ready_addresses,
        network,
    } = service;
    sdk::Service {
        name: name.clone(),
        namespace: namespace.clone(),
        labels: to_sdk_key_values(labels),
        annotations: to_sdk_key_values(annotations),
        ports: ports.iter().map(to_sdk_port).collect(),
        publish_not_ready_addresses: *publish_not_ready_addresses,
        network: network.clone(),
    }
}

fn to_sdk_pod(pod: &wit::Pod) -> sdk::Pod {
    let wit::Pod {
        name,
        namespace,
        uid,
        labels,
        annotations,
        phase,
        ready,
        terminating,
        node_name,
        zone,
        ips,
    } = pod;
    sdk::Pod {
        name: name.clone(),
        namespace: namespace.clone(),
        uid: uid.clone(),
        labels: to_sdk_key_values(labels),
        annotations: to_sdk_key_values(annotations),
        phase: to_sdk_phase(*phase),
        ready: *ready,
        terminating: *terminating,
        node_name: node_name.clone(),
        zone: zone.clone(),
        ips: ips.clone(),
    }
}

fn to_sdk_key_values(list: &[wit::KeyValue]) -> Vec<sdk::KeyValue> {
    list.iter()
        .map(|wit::KeyValue { key, value }| sdk::KeyValue {
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

fn to_sdk_phase(phase: wit::PodPhase) -> sdk::PodPhase {
    match phase {
        wit::PodPhase::Pending => sdk::PodPhase::Pending,
        wit::PodPhase::Running => sdk::PodPhase::Running,
        wit::PodPhase::Succeeded => sdk::PodPhase::Succeeded,
        wit::PodPhase::Failed => sdk::PodPhase::Failed,
        wit::PodPhase::Unknown => sdk::PodPhase::Unknown,
    }
}

fn to_sdk_port(port: &wit::ServicePort) -> sdk::ServicePort {
    let wit::ServicePort {
        name,
        protocol,
        port,
        target_port,
        app_protocol,
    } = port;
    sdk::ServicePort {
        name: name.clone(),
        protocol: protocol.clone(),
        port: *port,
        target_port: match target_port {
            wit::TargetPort::Number(n) => sdk::TargetPort::Number(*n),
            wit::TargetPort::Name(name) => sdk::TargetPort::Name(name.clone()),
        },
        app_protocol: app_protocol.clone(),
    }
}

fn to_wit_decision(decision: sdk::Decision) -> wit::Decision {
    match decision {
        sdk::Decision::Include(sdk::Conditions {
            ready,
            serving,
            terminating,
        }) => wit::Decision::Include(wit::Conditions {
            ready,
            serving,
            terminating,
        }),
        sdk::Decision::Exclude(reason) => wit::Decision::Exclude(reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wit::{pod, service};

    /// A decision as `Ok((ready, serving, terminating))` or `Err(reason)`, to compare.
    fn seen(decision: &wit::Decision) -> Result<(bool, bool, bool), String> {
        match decision {
            wit::Decision::Include(c) => Ok((c.ready, c.serving, c.terminating)),
            wit::Decision::Exclude(reason) => Err(reason.clone()),
        }
    }

    fn decide(
        service: &wit::Service,
        pods: &[wit::Pod],
    ) -> Vec<Result<(bool, bool, bool), String>> {
        evaluate(service, pods, "")
            .expect("the policy decides")
            .iter()
            .map(seen)
            .collect()
    }

    #[test]
    fn pods_are_decided_by_the_default_policys_rules() {
        let web = service("web").label("app", "web").build();
        let pods = [
            pod("ready").label("app", "web").build(),
            pod("other-app").label("app", "db").build(),
            pod("no-app").build(),
            pod("done")
                .label("app", "web")
                .phase(wit::PodPhase::Succeeded)
                .build(),
            pod("starting")
                .label("app", "web")
                .phase(wit::PodPhase::Pending)
                .ready(false)
                .build(),
            pod("leaving").label("app", "web").terminating(true).build(),
        ];
        assert_eq!(
            decide(&web, &pods),
            [
                Ok((true, true, false)),
                Err(r#"pod label app="db" does not match the Service's "web""#.to_owned()),
                Err(r#"pod label app is missing (the Service selects app="web")"#.to_owned()),
                Err("pod phase is Succeeded".to_owned()),
                Ok((false, false, false)),
                Ok((false, true, true)),
            ]
        );
    }

    #[test]
    fn a_service_publishing_not_ready_addresses_gets_its_pods_ready() {
        let publishing = service("web").publish_not_ready_addresses(true).build();
        let pods = [
            pod("not-ready").ready(false).build(),
            pod("leaving").ready(false).terminating(true).build(),
        ];
        assert_eq!(
            decide(&publishing, &pods),
            [Ok((true, false, false)), Ok((true, false, true))]
        );
    }

    #[test]
    fn the_name_label_selects_before_app() {
        let web = service("web")
            .label("app.kubernetes.io/name", "web")
            .label("app", "legacy")
            .build();
        let pods = [
            pod("named").label("app.kubernetes.io/name", "web").build(),
            pod("legacy").label("app", "legacy").build(),
        ];
        let decisions = decide(&web, &pods);
        assert_eq!(decisions[0], Ok((true, true, false)));
        assert!(decisions[1].is_err(), "{:?}", decisions[1]);
    }

    #[test]
    fn a_configuration_is_checked_as_the_plugin_checks_it() {
        let web = service("web").build();
        let pods = [pod("p").build()];
        assert_eq!(evaluate(&web, &pods, " {} ").map(|d| d.len()), Ok(1));
        let err = evaluate(&web, &pods, r#"{"strict": true}"#).map(|d| d.len());
        assert!(
            err.as_ref()
                .is_err_and(|e| e.contains("takes no configuration")),
            "{err:?}"
        );
    }

    #[test]
    fn every_field_crosses_and_no_pod_has_a_network_condition() {
        let web = service("web")
            .namespace("shop")
            .label("app", "web")
            .annotation("isim.dev/network", "macvlan")
            .port("http", 80, 8080)
            .network("shop/macvlan")
            .build();
        let pods = [pod("p")
            .namespace("shop")
            .label("app", "web")
            .annotation("a", "b")
            .phase(wit::PodPhase::Unknown)
            .node("n")
            .zone("z")
            .ips(["192.0.2.7", "2001:db8::7"])
            .build()];
        let prepared = prepare(&web, &pods);
        assert_eq!((prepared.len(), prepared.is_empty()), (1, false));
        assert_eq!(prepared.network, [None]);
        let s = &prepared.service;
        assert_eq!((s.name.as_str(), s.namespace.as_str()), ("web", "shop"));
        assert_eq!(s.labels[0].value, "web");
        assert_eq!(s.annotations[0].key, "isim.dev/network");
        assert_eq!(s.ports[0].target_port, sdk::TargetPort::Number(8080));
        assert_eq!(s.network, "shop/macvlan");
        let p = &prepared.pods[0];
        assert_eq!(
            (p.name.as_str(), p.namespace.as_str(), p.uid.as_str()),
            ("p", "shop", "uid-p")
        );
        assert_eq!(p.annotations[0].value, "b");
        assert_eq!(p.phase, sdk::PodPhase::Unknown);
        assert_eq!((p.node_name.as_str(), p.zone.as_str()), ("n", "z"));
        assert_eq!(p.ips, ["192.0.2.7", "2001:db8::7"]);

        let prepared_answer = evaluate_prepared(&prepared, "").map(to_wit);
        let answer = evaluate(&web, &pods, "");
        assert_eq!(
            prepared_answer.map(|d| d.iter().map(seen).collect::<Vec<_>>()),
            answer.map(|d| d.iter().map(seen).collect::<Vec<_>>())
        );
    }
}
