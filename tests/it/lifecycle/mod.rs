//! Task lifecycle: ListTasks (pagination, cursors, the 1 MiB bound, filters), CancelTask,
//! approvals as INPUT_REQUIRED, revocation on every method, the status index kept current by
//! Q's change feed, the execution deadline, and dispatch recovery by the reconciler across
//! replicas and SIGKILLs.

mod approvals;
mod cancel;
mod deadline;
mod feed;
mod filters;
mod pagination;
mod reconciler;
mod revocation;
