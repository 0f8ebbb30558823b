//! Screening a pod change before it costs a reconcile: a pod event concerns every Service on
//! the pod's network, since any of their policies may include the pod, but for most of them
//! it moves nothing. For a Service that does not include the pod now, its policy is asked
//! about that one pod here ([`decide::screen`]), off the async runtime; the Service is
//! reconciled only when the pod becomes included (its reconcile reuses the answer), or
//! anything else calls for the full path (its attachment must be reported, no decisions are
//! remembered, the plugin fails).
//!
//! So a Ready flip in a network of 100 Services costs one reconcile, of the Service that
//! publishes the pod, which does not wait behind 99 others in the Controller's queue.

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::Store;

use super::shared::{Shared, read, store_key};
use nad_core::{
    decide::{self, Screened},
    observe,
};
use nad_model::input::service_record::ServiceRecord;
use nad_model::input::target::Target;
use nad_model::service_ref::ServiceRef;
use nad_plugin_policy::PluginPolicy;
use nad_plugin_runtime::SharedPlugins;

/// What screening needs besides the shared state.
#[derive(Clone)]
pub struct Screen {
    pub services: Store<ServiceRecord>,
    pub plugins: Arc<SharedPlugins>,
}

impl Screen {
    /// Of the `services` a change of `pod` at `at` concerns, those that must reconcile, with
    /// the change noted in their bookkeeping. Blocking: it may call plugins.
    pub fn screen(
        &self,
        shared: &Shared,
        pod: &str,
        at: Timestamp,
        services: Vec<ServiceRef>,
    ) -> Vec<ServiceRef> {
        let mut moved = Vec::new();
        for service in services {
            if let Screened::Moves(answer) = self.moves(shared, pod, &service) {
                shared.book.lock().screened(&service, pod, at, answer);
                moved.push(service);
            }
        }
        moved
    }

    /// Whether the change of `pod` may move an endpoint of `service`.
    fn moves(&self, shared: &Shared, pod: &str, key: &ServiceRef) -> Screened {
        if shared.book.lock().reconciles_at_once(key, pod) {
            return Screened::Moves(None);
        }
        let Some(service) = self.services.get(&store_key(key)) else {
            return Screened::Moves(None);
        };
        let Target::Managed(target) = service.target() else {
            return Screened::Moves(None);
        };
        let changed = observe::named(&read(&shared.pods), &read(&shared.zones), target, [pod]);
        if !changed.skipped.is_empty() || !changed.ignored_ips.is_empty() {
            return Screened::Moves(None);
        }
        let Some(candidate) = changed.candidates.first() else {
            // Not a candidate (any more): it was not included, so nothing moves.
            return Screened::Still;
        };
        let mut policy = PluginPolicy::new(self.plugins.snapshot(), target);
        let screened = decide::screen(&mut policy, target, candidate);
        let record = policy.into_record();
        shared.metrics.plugin_calls(&record.calls);
        if record.fell_back.is_some() || record.load_warning.is_some() {
            // The reconcile tells the Service why.
            return Screened::Moves(None);
        }
        if matches!(screened, Screened::Still) {
            tracing::debug!(
                service = %key.name,
                namespace = key.namespace.as_str(),
                %pod,
                "changed pods move no endpoint; nothing to plan"
            );
        }
        screened
    }
}
