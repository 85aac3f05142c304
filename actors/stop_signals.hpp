#pragma once
// Process-level stop requests: SIGINT and SIGTERM set a flag that every actor's poll loop observes (its poll wait
// is bounded, see actor_options::max_poll_wait). Signal handlers can do nothing else safely.

namespace zmoe {

/// Installs SIGINT/SIGTERM handlers that set the stop flag. Idempotent.
void install_stop_signal_handlers();
/// True once SIGINT or SIGTERM arrived (or request_process_stop was called).
bool stop_signal_received();
/// Sets the flag as a signal would (async-signal-safe).
void request_process_stop();
/// Clears the flag (tests that raise signals use it to leave the process as they found it).
void clear_stop_signal();

}  // namespace zmoe
