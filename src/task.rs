//! Named background tasks, and the set that joins them at shutdown.
//!
//! Every task the relay starts goes through [`spawn`], which runs it inside a
//! `task{name=…}` tracing span: its log lines say which task wrote them, and a
//! debug line marks its end. Tasks that must not outlive a command (the HTTP
//! endpoint and its connections, the producer probe) are spawned into a [`Tasks`]
//! set, whose [`Tasks::join`] waits for every one of them.
//!
//! Invariant: after `Tasks::join` returns, no task of the set is running; a task
//! still running at the deadline is aborted and reported, never left behind
//! silently.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use tokio::task::{JoinHandle, JoinSet};
use tracing::Instrument;

/// Spawn `future` as a task called `name`.
pub fn spawn<F>(name: &'static str, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(named(name, future))
}

/// `future` inside the task's span, with a debug line when it ends.
fn named<F: Future>(name: &'static str, future: F) -> impl Future<Output = F::Output> {
    let span = tracing::info_span!("task", name);
    async move {
        let output = future.await;
        tracing::debug!("task ended");
        output
    }
    .instrument(span)
}

/// A set of named tasks, owned by whoever started them and joined by it.
#[derive(Debug, Default)]
pub struct Tasks {
    set: JoinSet<()>,
    names: HashMap<tokio::task::Id, &'static str>,
}

impl Tasks {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Spawn `future` as a task called `name` that [`Tasks::join`] waits for.
    pub fn spawn<F>(&mut self, name: &'static str, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        // Forget tasks that already ended, so a long-lived set stays small.
        while let Some(ended) = self.set.try_join_next_with_id() {
            self.forget(ended);
        }
        let handle = self.set.spawn(named(name, future));
        self.names.insert(handle.id(), name);
    }

    /// Wait until every task has ended (their own stop signal must already have
    /// fired). Tasks still running after `deadline` are aborted with a warning.
    pub async fn join(mut self, deadline: Duration) {
        let all_ended = tokio::time::timeout(deadline, async {
            while let Some(ended) = self.set.join_next_with_id().await {
                self.forget(ended);
            }
        });
        if all_ended.await.is_ok() {
            return;
        }
        for name in self.names.values() {
            tracing::warn!(
                task = name,
                ?deadline,
                "task did not stop in time; aborting it"
            );
        }
        self.set.shutdown().await;
    }

    fn forget(&mut self, ended: Result<(tokio::task::Id, ()), tokio::task::JoinError>) {
        let id = match ended {
            Ok((id, ())) => id,
            Err(err) => {
                let name = self.names.get(&err.id()).copied().unwrap_or("?");
                tracing::error!(task = name, error = %err, "task failed");
                err.id()
            }
        };
        self.names.remove(&id);
    }

    /// How many tasks are still running or not yet joined.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tokio_util::sync::CancellationToken;

    #[tokio::test]
    async fn join_waits_for_tasks_that_stop_on_the_signal() {
        let mut tasks = Tasks::new();
        let stop = CancellationToken::new();
        let done = Arc::new(AtomicBool::new(false));
        let (s, d) = (stop.clone(), done.clone());
        tasks.spawn("worker", async move {
            s.cancelled().await;
            tokio::task::yield_now().await;
            d.store(true, Ordering::SeqCst);
        });
        stop.cancel();
        tasks.join(Duration::from_secs(60)).await;
        assert!(
            done.load(Ordering::SeqCst),
            "join returned before the task ended"
        );
    }

    #[tokio::test]
    async fn join_aborts_a_task_that_ignores_the_signal() {
        let mut tasks = Tasks::new();
        let finished = Arc::new(AtomicBool::new(false));
        let f = finished.clone();
        tasks.spawn("stuck", async move {
            std::future::pending::<()>().await;
            f.store(true, Ordering::SeqCst);
        });
        let weak = Arc::downgrade(&finished);
        drop(finished);
        tasks.join(Duration::from_millis(10)).await;
        // The aborted task's future was dropped, and with it its clone of the flag.
        assert!(weak.upgrade().is_none(), "the stuck task is still alive");
    }
}
