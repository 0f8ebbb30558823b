//! One object of the controller's namespace, watched by name (the RBAC grants it by name): its
//! states as they come, the watcher's initial listing folded into one, and a word when nothing
//! came for [`TERM_CHECK`], so that the caller can look whether its term has ended, or whether
//! something is due, while the object is quiet. The plugin ConfigMap and the registry settings
//! are watched so.

use std::time::Duration;

use futures::{StreamExt as _, stream::BoxStream};
use kube::{
    Api, Client, Resource,
    runtime::{WatchStreamExt as _, watcher},
};
use serde::de::DeserializeOwned;

/// How long a quiet watch waits before it says so ([`Seen::Quiet`]).
pub const TERM_CHECK: Duration = Duration::from_secs(1);

/// What a [`Named`] watch saw.
#[derive(Debug)]
pub enum Seen<K> {
    /// The object as it is now; `None`: it does not exist.
    State(Option<K>),
    /// Nothing for [`TERM_CHECK`].
    Quiet,
    /// The watch failed (it retries, within the shared backoff): what failed, described.
    Failed(String),
}

/// What can be watched by name: a namespaced object the API sends as JSON.
pub trait Object:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + std::fmt::Debug
    + Send
    + 'static
{
}

impl<K> Object for K where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static
{
}

/// The watch of one object by name.
pub struct Named<K> {
    events: BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>,
    listed: Option<K>,
}

impl<K: Object> Named<K> {
    /// Watches `namespace/name` (a field selector: only that object is listed or sent).
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        let api: Api<K> = Api::namespaced(client, namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        Self {
            events: watcher(api, config)
                .backoff(super::health::backoff())
                .boxed(),
            listed: None,
        }
    }

    /// The next thing seen; `None` once the watch has ended. `count` sees every event the
    /// watcher gives (the watch health metrics count them).
    pub async fn next(
        &mut self,
        count: impl Fn(&Result<watcher::Event<K>, watcher::Error>),
    ) -> Option<Seen<K>> {
        loop {
            let event = match tokio::time::timeout(TERM_CHECK, self.events.next()).await {
                Err(_) => return Some(Seen::Quiet),
                Ok(event) => event?,
            };
            count(&event);
            match event {
                Err(e) => return Some(Seen::Failed(nad_process::kube_error::describe_watch(&e))),
                Ok(watcher::Event::Init) => self.listed = None,
                Ok(watcher::Event::InitApply(object)) => self.listed = Some(object),
                Ok(watcher::Event::InitDone) => return Some(Seen::State(self.listed.take())),
                Ok(watcher::Event::Apply(object)) => return Some(Seen::State(Some(object))),
                Ok(watcher::Event::Delete(_)) => return Some(Seen::State(None)),
            }
        }
    }
}
