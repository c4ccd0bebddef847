//! Task lifecycle: ListTasks (pagination, cursors, the 1 MiB bound, filters), CancelTask,
//! approvals as INPUT_REQUIRED, revocation on every method, the status index kept current by
//! Q's change feed, the execution deadline, dispatch recovery by the reconciler across
//! replicas and SIGKILLs, and the observation window (its end, a client gone mid-wait, the
//! profile's defaults).

mod approvals;
mod cancel;
mod deadline;
mod feed;
mod filters;
mod pagination;
mod reconciler;
mod revocation;
mod window;
