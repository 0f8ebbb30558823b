//! Screening a pod change before it costs a reconcile: a pod event concerns every Service on
//! the pod's network, since any of their policies may include the pod, but for most of them
//! it moves nothing. For a Service that does not include the pod now, the plugin is asked
//! about that one pod here, off the async runtime; the Service is reconciled only when the
//! pod becomes included, or anything else calls for the full path (its attachment must be
//! reported, no decisions are remembered, the plugin fails).
//!
//! So a Ready flip in a network of 100 Services costs one reconcile, of the Service that
//! publishes the pod, which does not wait behind 99 others in the Controller's queue.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::{ObjectRef, Store};

use super::{Shared, read};
use crate::{
    input::target::{self, ServiceTarget, Target},
    plugin::SharedPlugins,
    reconcile::{
        candidates::Observed,
        decide::{self, Inputs},
        observe::{self, Observation},
        scope::Scope,
    },
};

/// What screening needs besides the shared state.
#[derive(Clone)]
pub struct Screen {
    pub services: Store<Service>,
    pub plugins: Arc<SharedPlugins>,
}

impl Screen {
    /// Of the `services` a change of `pod` concerns, those that must reconcile. Blocking: it
    /// may call plugins.
    pub fn screen(
        &self,
        shared: &Shared,
        pod: &str,
        services: Vec<ObjectRef<Service>>,
    ) -> Vec<ObjectRef<Service>> {
        services
            .into_iter()
            .filter(|service| self.moves(shared, pod, service))
            .collect()
    }

    /// Whether the change of `pod` may move an endpoint of `service`.
    fn moves(&self, shared: &Shared, pod: &str, key: &ObjectRef<Service>) -> bool {
        let remembered = {
            let book = shared.book.lock();
            if book.included(key, pod) {
                return true;
            }
            match book.remembered(key) {
                // The pod is not among those included: whose decisions these are is all the
                // screening needs of them.
                Some(remembered) => remembered.without_pods(),
                None => return true,
            }
        };
        let Some(service) = self.services.get(key) else {
            return true;
        };
        let Target::Managed(target) = target::classify(&service) else {
            return true;
        };
        let changed = observe_one(shared, &target, pod);
        if !changed.skipped.is_empty() || !changed.ignored_ips.is_empty() {
            return true;
        }
        if changed.candidates.is_empty() {
            // Not a candidate (any more): it was not included, so nothing moves.
            return false;
        }
        let decided = decide::decide(Inputs {
            plugins: self.plugins.snapshot(),
            target,
            scope: Scope::Pods([pod.to_owned()].into()),
            remembered: Some(remembered),
            changed,
            touches_published: false,
            observe_all: Box::new(|| Observed::new(Observation::default())),
        });
        let moves_nothing = matches!(decided.outcome, Ok(None))
            && decided.fell_back.is_none()
            && decided.load_warning.is_none();
        if moves_nothing {
            shared.metrics.plugin_calls(&decided.calls);
            tracing::debug!(
                service = %key.name,
                namespace = key.namespace.as_deref().unwrap_or_default(),
                %pod,
                "changed pods move no endpoint; nothing to plan"
            );
        }
        !moves_nothing
    }
}

fn observe_one(shared: &Shared, target: &ServiceTarget, pod: &str) -> Observation {
    observe::named(&read(&shared.pods), &read(&shared.zones), target, [pod])
}
