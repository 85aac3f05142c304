#pragma once
// Who must present the API key (docs/reliability.md, "Client authentication"). The rule: a client needs the key
// when it reaches the frontend over TCP from an address that is not loopback. Loopback is 127.0.0.0/8, ::1 and
// IPv4-mapped 127.0.0.0/8 (::ffff:127.x.y.z); ipc:// and inproc:// clients are local by construction. A frontend
// bound where such clients can reach it (any TCP address but a loopback one: 0.0.0.0, *, a host's address, a
// hostname other than localhost) refuses to start without a key, so "not on loopback" always means "with a key".

#include <string>
#include <string_view>

namespace zmoe {

/// The API key from the environment (ZMOE_API_KEY); empty when unset.
std::string api_key_from_env();

/// True for a loopback IP address as written by ZeroMQ's Peer-Address or in an endpoint ("127.0.0.1",
/// "127.3.4.5", "::1", "[::1]", "::ffff:127.0.0.1", "localhost").
bool is_loopback_address(std::string_view address);

/// True when clients not on loopback can connect to a frontend bound at `endpoint`: tcp:// with a host that is not
/// a loopback address. False for ipc://, inproc:// and tcp://127.x / [::1] / localhost.
bool endpoint_reachable_off_host(std::string_view endpoint);

}  // namespace zmoe
