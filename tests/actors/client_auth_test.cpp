// The rule for who needs the API key (actors/client_auth.hpp): loopback addresses and endpoints, exactly.

#include "actors/client_auth.hpp"

#include <gtest/gtest.h>

#include "actors/run_secret.hpp"

namespace zmoe {
namespace {

TEST(ClientAuth, LoopbackAddresses) {
    for (const char* a : {"127.0.0.1", "127.0.0.2", "127.255.3.4", "::1", "[::1]", "::ffff:127.0.0.1", "localhost"})
        EXPECT_TRUE(is_loopback_address(a)) << a;
    for (const char* a : {"", "192.0.2.7", "10.0.0.1", "0.0.0.0", "::", "::ffff:10.0.0.1", "128.0.0.1", "127x",
                          "127.0.0.1.evil.example", "fe80::1", "*"})
        EXPECT_FALSE(is_loopback_address(a)) << a;
}

TEST(ClientAuth, EndpointsOtherHostsCanReach) {
    for (const char* e : {"tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://192.0.2.7:5555", "tcp://eth0:5555",
                          "tcp://myhost:5555", "tcp://[::]:5555"})
        EXPECT_TRUE(endpoint_reachable_off_host(e)) << e;
    for (const char* e : {"tcp://127.0.0.1:5555", "tcp://127.0.0.2:5555", "tcp://localhost:5555", "tcp://[::1]:5555",
                          "ipc:///tmp/zmoe/clients", "inproc://clients"})
        EXPECT_FALSE(endpoint_reachable_off_host(e)) << e;
}

TEST(ClientAuth, KeysCompareWhole) {
    EXPECT_TRUE(secrets_equal("s3cret-key", "s3cret-key"));
    EXPECT_FALSE(secrets_equal("s3cret-key", "s3cret-kez"));
    EXPECT_FALSE(secrets_equal("s3cret", "s3cret-key"));  // a prefix is not the key
    EXPECT_FALSE(secrets_equal("s3cret-key-and-more", "s3cret-key"));
    EXPECT_FALSE(secrets_equal("", "k"));
}

}  // namespace
}  // namespace zmoe
