//! How every watch lists: the initial list as a watch stream (Kubernetes' WatchList, on by
//! default since 1.32, which client-go's informers use too), so that no page of whole objects
//! is held while it is turned into what the caches keep. A server that refuses streaming gets
//! pages instead, as client-go falls back.

use std::fmt::Debug;

use futures::{Stream, StreamExt, stream};
use kube::{
    Api, Resource,
    runtime::watcher::{self, Event, watcher},
};
use serde::de::DeserializeOwned;

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

/// Whether the API server refused a streaming list: a server without the WatchList feature
/// rejects `sendInitialEvents` as invalid.
fn refuses_streaming<K>(item: &Result<Event<K>, watcher::Error>) -> bool {
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

/// Against a mocked API: the point is the requests' shape after a refusal.
#[cfg(test)]
mod fallback {
    use super::*;
    use http::{Request, Response};
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
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
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
}
