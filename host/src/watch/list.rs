//! How every watch lists: the initial list as a watch stream (Kubernetes' WatchList, on by
//! default since 1.32, which client-go's informers use too), so that no page of whole objects
//! is held while it is turned into what the caches keep. A server that refuses streaming gets
//! pages instead, as client-go falls back.
//!
//! A streamed list is answered from the API server's watch cache, which answers while etcd
//! does not: the controller says its caches synced only after a quorum read
//! ([`crate::controller`]), so that readiness means the cluster's store answers too.

use std::{fmt::Debug, time::Duration};

use futures::{Stream, StreamExt, stream};
use k8s_openapi::api::core::v1::Service;
use kube::{
    Api, Resource,
    api::ListParams,
    runtime::watcher::{self, Event, watcher},
};
use serde::de::DeserializeOwned;

use super::health::backoff;
use nad_process::kube_error::describe;

/// Pages of the initial list when the API server cannot stream it: each page is whole objects
/// (managed fields and all) until they are reduced, and the allocator keeps the peak.
pub const PAGE_SIZE: u32 = 100;

type Events<K> = stream::BoxStream<'static, Result<Event<K>, watcher::Error>>;

/// `watcher(api, config)` with its lists streamed, or paged once the server has refused a
/// streaming list (then for good: the server's features do not change under a watch). `what`
/// names the objects in the log.
pub fn streamed<K>(
    api: Api<K>,
    config: watcher::Config,
    what: &'static str,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let first: Events<K> = watcher(api.clone(), config.clone().streaming_lists()).boxed();
    stream::unfold((first, true), move |(mut events, mut streaming)| {
        let (api, config) = (api.clone(), config.clone());
        async move {
            loop {
                let item = events.next().await?;
                if streaming && refuses_streaming(&item) {
                    tracing::warn!(
                        watch = what,
                        "the API server does not stream lists (the WatchList feature is off); listing page by page"
                    );
                    streaming = false;
                    events = watcher(api.clone(), config.clone().page_size(PAGE_SIZE)).boxed();
                    continue;
                }
                return Some((item, (events, streaming)));
            }
        }
    })
}

/// How long a quorum read may take before it is tried again.
const QUORUM_TIMEOUT: Duration = Duration::from_secs(5);

/// Resolves once the API server has answered a quorum read of the Services of `api`: a list
/// without a resource version, which the API server answers from etcd or from a watch cache
/// it has first brought up to etcd's current revision. The streamed lists come from the watch
/// cache, which answers while etcd cannot; after this read, etcd is known to answer (the
/// watches carry on from their lists, and the reconciles' writes can succeed). Tried again with
/// the watches' backoff, each try bounded by [`QUORUM_TIMEOUT`]; the first failure is logged.
pub async fn quorum_read(api: Api<Service>) {
    let mut delays = backoff();
    let mut failed = false;
    let one = ListParams::default().limit(1);
    loop {
        let read = api.list_metadata(&one);
        let error = match tokio::time::timeout(QUORUM_TIMEOUT, read).await {
            Ok(Ok(_)) => {
                if failed {
                    tracing::info!("the API server answers quorum reads again");
                }
                return;
            }
            Ok(Err(e)) => describe(&e),
            Err(_) => format!("no answer within {QUORUM_TIMEOUT:?}"),
        };
        if !failed {
            tracing::warn!(
                error = %error,
                "the caches are listed, but the API server cannot read from etcd (a quorum list of Services failed); not ready until it can"
            );
            failed = true;
        }
        let delay = delays.next().unwrap_or(QUORUM_TIMEOUT);
        tokio::time::sleep(delay).await;
    }
}

/// Whether the API server refused a streaming list: a server without the WatchList feature
/// rejects `sendInitialEvents` as invalid.
pub fn refuses_streaming<K>(item: &Result<Event<K>, watcher::Error>) -> bool {
    match item {
        Err(
            watcher::Error::WatchStartFailed(kube::Error::Api(status))
            | watcher::Error::WatchFailed(kube::Error::Api(status)),
        )
        | Err(watcher::Error::WatchError(status)) => matches!(status.code, 400 | 422),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn a_refused_streaming_list_is_told_from_other_failures() {
        let status = |code| kube::core::Status::failure("", "").with_code(code);
        let refused: Result<watcher::Event<Pod>, _> = Err(watcher::Error::WatchStartFailed(
            kube::Error::Api(Box::new(status(422))),
        ));
        assert!(refuses_streaming(&refused));
        let forbidden: Result<watcher::Event<Pod>, _> = Err(watcher::Error::WatchStartFailed(
            kube::Error::Api(Box::new(status(403))),
        ));
        assert!(!refuses_streaming(&forbidden));
        assert!(!refuses_streaming::<Pod>(&Ok(watcher::Event::Init)));
    }
}

/// Against a mocked API: the point is the requests' shape, after a refusal and for a quorum
/// read.
#[cfg(test)]
mod fallback {
    use super::*;
    use http::Response;
    use k8s_openapi::api::core::v1::Pod;
    use kube::{Client, client::Body};
    use serde_json::json;

    fn answer(code: u16, body: &serde_json::Value) -> Response<Body> {
        Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap()
    }

    #[tokio::test]
    async fn a_server_that_refuses_a_streaming_list_is_listed_in_pages() {
        let (service, mut handle) = crate::mock_api::pair();
        let server = tokio::spawn(async move {
            let (request, reply) = handle.next_request().await.unwrap();
            let query = request.uri().query().unwrap_or_default().to_owned();
            assert!(query.contains("sendInitialEvents=true"), "{query}");
            reply.send_response(answer(
                422,
                &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "Invalid", "code": 422, "message": "sendInitialEvents is forbidden"}),
            ));
            let (request, reply) = handle.next_request().await.unwrap();
            let query = request.uri().query().unwrap_or_default().to_owned();
            assert!(
                query.contains(&format!("limit={PAGE_SIZE}")) && !query.contains("watch"),
                "a list in pages: {query}"
            );
            reply.send_response(answer(
                200,
                &json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"},
                        "items": [{"metadata": {"name": "p", "namespace": "default"}}]}),
            ));
            handle
        });
        let api: Api<Pod> = Api::default_namespaced(Client::new(service, "default"));
        let events: Vec<_> = streamed(api, watcher::Config::default(), "pods")
            .take(3)
            .collect()
            .await;
        assert!(
            matches!(events[0], Ok(Event::Init)),
            "the refusal is not passed on as a failure: {events:?}"
        );
        assert!(
            matches!(&events[1], Ok(Event::InitApply(pod)) if pod.metadata.name.as_deref() == Some("p"))
        );
        assert!(matches!(events[2], Ok(Event::InitDone)));
        drop(server.await.unwrap());
    }

    /// A read the API server may not answer from its watch cache alone: no resource version
    /// (`resourceVersion=0` is what the streamed lists were answered with). A failure is tried
    /// again, and only an answer ends the wait.
    #[tokio::test]
    async fn the_quorum_read_names_no_resource_version_and_waits_for_an_answer() {
        let (service, mut handle) = crate::mock_api::pair();
        let api: Api<Service> = Api::all(Client::new(service, "default"));
        let read = tokio::spawn(quorum_read(api));
        for (attempt, code) in [503, 200].into_iter().enumerate() {
            let (request, reply) = handle.next_request().await.unwrap();
            let query = request.uri().query().unwrap_or_default().to_owned();
            assert!(
                request.uri().path() == "/api/v1/services"
                    && query.contains("limit=1")
                    && !query.contains("resourceVersion")
                    && !query.contains("watch"),
                "attempt {attempt}: {} {query}",
                request.uri().path()
            );
            assert!(!read.is_finished(), "done before an answer");
            let body = if code == 200 {
                json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                       "metadata": {"resourceVersion": "7"}, "items": []})
            } else {
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "reason": "ServiceUnavailable", "code": 503, "message": "etcdserver: request timed out"})
            };
            reply.send_response(answer(code, &body));
        }
        tokio::time::timeout(Duration::from_secs(5), read)
            .await
            .expect("done once answered")
            .unwrap();
    }
}
