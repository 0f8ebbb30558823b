//! The rules of Kubernetes' own EndpointSlice controller that a policy follows to publish
//! endpoints as Kubernetes would.

use crate::{
    ConditionStatus, Conditions, Decision, KeyValue, Pod, PodCondition, PodPhase, Service,
};

/// The endpoint conditions Kubernetes gives a pod: serving = the pod is Ready; terminating =
/// it is being deleted; ready = serving and not terminating, or always when the Service
/// publishes not-ready addresses.
pub fn conditions(service: &Service, pod: &Pod) -> Conditions {
    let serving = pod.ready;
    Conditions {
        ready: service.publish_not_ready_addresses || (serving && !pod.terminating),
        serving,
        terminating: pod.terminating,
    }
}

/// [`conditions`], with the pod's readiness on the Service's own network (`network`, from
/// `network_readiness()`): a pod that does not answer there (`False`) is not serving, so not
/// ready unless the Service publishes not-ready addresses, whatever its `Ready` (which is
/// decided on the primary network) says. No condition (no network prober) or `Unknown`
/// changes nothing.
pub fn conditions_on_network(
    service: &Service,
    pod: &Pod,
    network: Option<&PodCondition>,
) -> Conditions {
    let mut conditions = conditions(service, pod);
    if network.is_some_and(|c| c.status == ConditionStatus::False) {
        conditions.serving = false;
        conditions.ready = service.publish_not_ready_addresses;
    }
    conditions
}

/// Why a pod whose containers have stopped is left out, as Kubernetes leaves it out; `None`
/// for a pod that may serve.
pub fn terminal(pod: &Pod) -> Option<Decision> {
    match pod.phase {
        PodPhase::Succeeded => Some(Decision::Exclude("pod phase is Succeeded".to_owned())),
        PodPhase::Failed => Some(Decision::Exclude("pod phase is Failed".to_owned())),
        PodPhase::Pending | PodPhase::Running | PodPhase::Unknown => None,
    }
}

/// The pod's decision once the policy selected it: left out when terminal, else included with
/// Kubernetes' conditions.
pub fn include(service: &Service, pod: &Pod) -> Decision {
    terminal(pod).unwrap_or_else(|| Decision::Include(conditions(service, pod)))
}

/// [`include`], with the pod's readiness on the Service's network
/// ([`conditions_on_network`]).
pub fn include_on_network(
    service: &Service,
    pod: &Pod,
    network: Option<&PodCondition>,
) -> Decision {
    terminal(pod).unwrap_or_else(|| Decision::Include(conditions_on_network(service, pod, network)))
}

/// The value of `key` in a list of labels or annotations. The host sorts lists by key, but a
/// linear scan does not rely on it and the lists are short.
pub fn value<'a>(list: &'a [KeyValue], key: &str) -> Option<&'a str> {
    list.iter()
        .find(|kv| kv.key == key)
        .map(|kv| kv.value.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{PodExt, ServiceExt, pod, service};

    #[test]
    fn conditions_are_kubernetes_own() {
        let web = service("web");
        let c = |pod: &Pod, service: &Service| {
            let c = conditions(service, pod);
            (c.ready, c.serving, c.terminating)
        };
        assert_eq!(c(&pod("a"), &web), (true, true, false));
        assert_eq!(c(&pod("a").not_ready(), &web), (false, false, false));
        assert_eq!(c(&pod("a").terminating(), &web), (false, true, true));
        assert_eq!(
            c(&pod("a").not_ready().terminating(), &web),
            (false, false, true)
        );
        let publishing = web.publishing_not_ready();
        assert_eq!(c(&pod("a").not_ready(), &publishing), (true, false, false));
        assert_eq!(c(&pod("a").terminating(), &publishing), (true, true, true));
    }

    #[test]
    fn a_pod_that_does_not_answer_on_the_network_is_not_serving() {
        use crate::testing::network_condition;
        let web = service("web");
        let c = |pod: &Pod, service: &Service, network: Option<&PodCondition>| {
            let c = conditions_on_network(service, pod, network);
            (c.ready, c.serving, c.terminating)
        };
        let down = network_condition(ConditionStatus::False);
        let up = network_condition(ConditionStatus::True);
        let unknown = network_condition(ConditionStatus::Unknown);
        assert_eq!(c(&pod("a"), &web, Some(&down)), (false, false, false));
        assert_eq!(c(&pod("a"), &web, Some(&up)), (true, true, false));
        assert_eq!(c(&pod("a"), &web, Some(&unknown)), (true, true, false));
        assert_eq!(c(&pod("a"), &web, None), (true, true, false), "no prober");
        assert_eq!(
            c(&pod("a").terminating(), &web, Some(&down)),
            (false, false, true)
        );
        let publishing = web.clone().publishing_not_ready();
        assert_eq!(c(&pod("a"), &publishing, Some(&down)), (true, false, false));
        assert!(matches!(
            include_on_network(&web, &pod("a").phase(PodPhase::Failed), Some(&up)),
            Decision::Exclude(_)
        ));
    }

    #[test]
    fn terminal_pods_are_left_out() {
        let web = service("web");
        assert!(matches!(
            include(&web, &pod("a").phase(PodPhase::Succeeded)),
            Decision::Exclude(r) if r.contains("Succeeded")
        ));
        assert!(matches!(
            include(&web, &pod("a").phase(PodPhase::Failed)),
            Decision::Exclude(_)
        ));
        assert!(matches!(
            include(&web, &pod("a").phase(PodPhase::Pending)),
            Decision::Include(_)
        ));
        assert_eq!(
            value(&pod("a").label("app", "web").labels, "app"),
            Some("web")
        );
        assert_eq!(value(&pod("a").labels, "app"), None);
    }
}
