//! MPS on a GPU (DESIGN 3): a GPU runs MPS when its compute list holds the MPS server
//! (`nvidia-cuda-mps-server`) or its MPS list (`nvmlDeviceGetMPSComputeRunningProcesses_v3`,
//! the clients only) is not empty. One server per user (nvidia-cuda-mps-control(1)): a CUDA
//! context of another user on that GPU waits until the server's clients are done.

use serde::Serialize;

/// The program the MPS control daemon starts for each user's server.
const SERVER_PROGRAM: &str = "nvidia-cuda-mps-server";

/// A GPU's MPS server and clients, as `--list --json` shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Mps {
    pub(crate) server_pid: Option<u32>,
    pub(crate) server_user: Option<String>,
    /// The server belongs to another user than gpurun's (its owner as /proc shows it, or a
    /// client's where the server is not seen), or to one /proc cannot name: a CUDA context of
    /// ours there would wait, and `--mps` would join a stranger's server.
    #[serde(skip)]
    pub(crate) foreign: bool,
    pub(crate) clients: Vec<MpsClient>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct MpsClient {
    pub(crate) pid: u32,
    pub(crate) user: Option<String>,
    pub(crate) used_bytes: Option<u64>,
}

/// Whether a command line is the MPS server's: its program's file name, whatever the path.
pub(crate) fn is_server(command: Option<&str>) -> bool {
    runs(command, SERVER_PROGRAM)
}

/// Whether a command line runs `program` (its file name, whatever the path): the MPS server,
/// or the control daemon (`nvidia-cuda-mps-control`).
pub(crate) fn runs(command: Option<&str>, program: &str) -> bool {
    command
        .and_then(|command| command.split_whitespace().next())
        .and_then(|first| first.rsplit('/').next())
        .is_some_and(|first| first == program)
}

/// Whether a process of a GPU's compute list may be its MPS server, so that the MPS list is
/// worth asking for: it is the server, or /proc cannot say what it is (a server in another PID
/// namespace). A GPU whose compute processes are all known and none the server runs no MPS,
/// and costs no second NVML call.
pub(crate) fn may_be_server(command: Option<&str>) -> bool {
    command.is_none_or(|command| is_server(Some(command)))
}

impl Mps {
    /// The MPS of a GPU from the server found in its compute list (PID, owner's name), its MPS
    /// list, and whose the processes are (`uid_of`), for the user `own_uid`; `None` where it
    /// runs none.
    pub(crate) fn from_lists(
        server: Option<(u32, Option<String>)>,
        clients: Vec<MpsClient>,
        uid_of: impl Fn(u32) -> Option<u32>,
        own_uid: u32,
    ) -> Option<Mps> {
        if server.is_none() && clients.is_empty() {
            return None;
        }
        let owner_uid = server.as_ref().map(|s| s.0).or(clients.first().map(|c| c.pid)).and_then(uid_of);
        Some(Mps {
            server_pid: server.as_ref().map(|s| s.0),
            server_user: server.and_then(|s| s.1),
            // An owner /proc cannot tell (hidepid, another PID namespace) is not ours.
            foreign: owner_uid != Some(own_uid),
            clients,
        })
    }

    /// `MPS server of user nobody (PID 4107000)`.
    pub(crate) fn server_words(&self) -> String {
        let user = self.server_user.as_deref().or(self.clients.first().and_then(|c| c.user.as_deref()));
        let user = user.map_or("an unknown user".to_owned(), |user| format!("user {user}"));
        match self.server_pid {
            Some(pid) => format!("MPS server of {user} (PID {pid})"),
            None => format!("MPS server of {user}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_or_a_client_makes_mps() {
        let uid = |pid: u32| Some(if pid == 7 { 65534 } else { 0 });
        assert_eq!(Mps::from_lists(None, Vec::new(), uid, 0), None);
        let found = || Some((7, Some("nobody".to_owned())));
        let server = Mps::from_lists(found(), Vec::new(), uid, 0).unwrap();
        assert_eq!(server.server_pid, Some(7));
        assert!(server.foreign && !Mps::from_lists(found(), Vec::new(), uid, 65534).unwrap().foreign);
        assert!(is_server(Some("/usr/bin/nvidia-cuda-mps-server -d")));
        assert_eq!(server.server_words(), "MPS server of user nobody (PID 7)");
        // A server not seen (another PID namespace): its clients say MPS runs.
        let client = MpsClient { pid: 9, user: Some("root".to_owned()), used_bytes: None };
        let unseen = Mps::from_lists(None, vec![client], uid, 65534).unwrap();
        assert_eq!((unseen.server_pid, unseen.foreign), (None, true));
        assert!(!is_server(Some("nvidia-cuda-mps-server-not")) && !is_server(None));
        // Worth asking the MPS list: the server, or a process /proc cannot name.
        assert!(may_be_server(None) && may_be_server(Some("/usr/bin/nvidia-cuda-mps-server")));
        assert!(!may_be_server(Some("python train.py")));
    }
}
