//! Waiting for something to hold, instead of sleeping for a while and hoping it does.

use std::time::{Duration, Instant};

/// How often [`eventually`] checks again.
const POLL: Duration = Duration::from_millis(50);

/// Polls `check` until it returns `Some`, for at most `within`; fails the test naming `what`
/// after that.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            started.elapsed() < within,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_check_that_holds_ends_the_wait_with_its_value() {
        let mut calls = 0;
        let got = eventually("the third call", Duration::from_secs(5), || {
            calls += 1;
            let n = calls;
            async move { (n == 3).then_some(n) }
        })
        .await;
        assert_eq!(got, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after 100ms waiting for nothing")]
    async fn a_check_that_never_holds_fails_naming_what_it_waited_for() {
        eventually("nothing", Duration::from_millis(100), || async {
            None::<()>
        })
        .await;
    }
}
