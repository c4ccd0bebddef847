//! The A2A 1.0 JSON-RPC methods this gateway knows, and the access each needs.

use crate::access::Purpose;
use crate::auth::Access;
use crate::http::authorize::AdmissionClass;

/// The A2A methods, with the access each needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    SendMessage,
    SendStreamingMessage,
    GetTask,
    ListTasks,
    CancelTask,
    SubscribeToTask,
    CreateTaskPushNotificationConfig,
    GetTaskPushNotificationConfig,
    ListTaskPushNotificationConfigs,
    DeleteTaskPushNotificationConfig,
    GetExtendedAgentCard,
}

impl Method {
    /// Every method, in the order of the enum (docs/migration.md lists each one).
    pub const ALL: [Method; 11] = [
        Method::SendMessage,
        Method::SendStreamingMessage,
        Method::GetTask,
        Method::ListTasks,
        Method::CancelTask,
        Method::SubscribeToTask,
        Method::CreateTaskPushNotificationConfig,
        Method::GetTaskPushNotificationConfig,
        Method::ListTaskPushNotificationConfigs,
        Method::DeleteTaskPushNotificationConfig,
        Method::GetExtendedAgentCard,
    ];

    pub fn parse(name: &str) -> Option<Method> {
        Some(match name {
            "SendMessage" => Method::SendMessage,
            "SendStreamingMessage" => Method::SendStreamingMessage,
            "GetTask" => Method::GetTask,
            "ListTasks" => Method::ListTasks,
            "CancelTask" => Method::CancelTask,
            "SubscribeToTask" => Method::SubscribeToTask,
            "CreateTaskPushNotificationConfig" => Method::CreateTaskPushNotificationConfig,
            "GetTaskPushNotificationConfig" => Method::GetTaskPushNotificationConfig,
            "ListTaskPushNotificationConfigs" => Method::ListTaskPushNotificationConfigs,
            "DeleteTaskPushNotificationConfig" => Method::DeleteTaskPushNotificationConfig,
            "GetExtendedAgentCard" => Method::GetExtendedAgentCard,
            _ => return None,
        })
    }

    /// `a2a:delegate` for what starts or stops work or configures delivery; `a2a:read` for the rest.
    pub fn access(self) -> Access {
        match self {
            Method::SendMessage
            | Method::SendStreamingMessage
            | Method::CancelTask
            | Method::CreateTaskPushNotificationConfig
            | Method::DeleteTaskPushNotificationConfig => Access::Delegate,
            Method::GetTask
            | Method::ListTasks
            | Method::SubscribeToTask
            | Method::GetTaskPushNotificationConfig
            | Method::ListTaskPushNotificationConfigs
            | Method::GetExtendedAgentCard => Access::Read,
        }
    }

    /// Whether the method only reads committed state, and so, within an opted-in outage grace,
    /// may be answered content-free to a caller known from before Q went down
    /// (`crate::access`).
    pub fn purpose(self) -> Purpose {
        match self {
            Method::GetTask | Method::ListTasks => Purpose::Read,
            _ => Purpose::Current,
        }
    }

    /// The rate-limit bucket the method spends: cancellation has its own, so no number of
    /// observation attempts can keep a principal from cancelling.
    pub fn admission(self) -> AdmissionClass {
        match self {
            Method::CancelTask => AdmissionClass::Cancellation,
            _ => AdmissionClass::General,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Method::SendMessage => "SendMessage",
            Method::SendStreamingMessage => "SendStreamingMessage",
            Method::GetTask => "GetTask",
            Method::ListTasks => "ListTasks",
            Method::CancelTask => "CancelTask",
            Method::SubscribeToTask => "SubscribeToTask",
            Method::CreateTaskPushNotificationConfig => "CreateTaskPushNotificationConfig",
            Method::GetTaskPushNotificationConfig => "GetTaskPushNotificationConfig",
            Method::ListTaskPushNotificationConfigs => "ListTaskPushNotificationConfigs",
            Method::DeleteTaskPushNotificationConfig => "DeleteTaskPushNotificationConfig",
            Method::GetExtendedAgentCard => "GetExtendedAgentCard",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_round_trips_and_has_access() {
        for name in [
            "SendMessage",
            "SendStreamingMessage",
            "GetTask",
            "ListTasks",
            "CancelTask",
            "SubscribeToTask",
            "CreateTaskPushNotificationConfig",
            "GetTaskPushNotificationConfig",
            "ListTaskPushNotificationConfigs",
            "DeleteTaskPushNotificationConfig",
            "GetExtendedAgentCard",
        ] {
            assert_eq!(Method::parse(name).unwrap().name(), name);
        }
        assert_eq!(Method::parse("message/send"), None);
        assert_eq!(Method::parse("sendmessage"), None);
        assert_eq!(Method::SendMessage.access(), Access::Delegate);
        assert_eq!(Method::CancelTask.access(), Access::Delegate);
        assert_eq!(Method::GetTask.access(), Access::Read);
        assert_eq!(Method::SubscribeToTask.access(), Access::Read);
        for m in Method::ALL {
            let expected = if m == Method::CancelTask {
                AdmissionClass::Cancellation
            } else {
                AdmissionClass::General
            };
            assert_eq!(m.admission(), expected, "{}", m.name());
        }
    }

    /// A new variant fails to compile here until it has an arm, and its arm fails to compile
    /// (index out of bounds) until `ALL` holds it.
    fn listed(m: Method) -> Method {
        match m {
            Method::SendMessage => Method::ALL[0],
            Method::SendStreamingMessage => Method::ALL[1],
            Method::GetTask => Method::ALL[2],
            Method::ListTasks => Method::ALL[3],
            Method::CancelTask => Method::ALL[4],
            Method::SubscribeToTask => Method::ALL[5],
            Method::CreateTaskPushNotificationConfig => Method::ALL[6],
            Method::GetTaskPushNotificationConfig => Method::ALL[7],
            Method::ListTaskPushNotificationConfigs => Method::ALL[8],
            Method::DeleteTaskPushNotificationConfig => Method::ALL[9],
            Method::GetExtendedAgentCard => Method::ALL[10],
        }
    }

    #[test]
    fn all_lists_each_method_once() {
        for m in Method::ALL {
            assert_eq!(listed(m), m);
            assert_eq!(Method::parse(m.name()), Some(m));
        }
        let names: std::collections::BTreeSet<_> = Method::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(names.len(), Method::ALL.len());
    }
}
