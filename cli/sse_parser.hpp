#pragma once
// An incremental parser of Server-Sent Events (the WHATWG "text/event-stream" format), as OpenAI-compatible servers
// stream completions: bytes go in as they arrive, split anywhere; complete events come out.

#include <string>
#include <string_view>
#include <vector>

namespace zmoe::cli {

/// One dispatched event: its type ("message" unless an `event:` field named another) and its data (the values of
/// its `data:` fields joined by "\n").
struct sse_event {
    std::string type = "message";
    std::string data;
};

class sse_parser {
  public:
    /// Parses `bytes` (any split of the stream: a line, a field, even a CR LF pair may straddle two calls) and
    /// appends every event completed by them to `out`. As the format says: lines end with LF, CR LF or CR; a blank
    /// line dispatches the event being built, unless it has no data field; a line starting with ':' is a comment;
    /// "field: value" loses one space after the colon; a line without a colon is a field with an empty value;
    /// `id` and `retry` (reconnection state) and unknown fields are skipped, as the format requires of a client.
    /// A leading UTF-8 byte order mark is skipped.
    void feed(std::string_view bytes, std::vector<sse_event>& out);

    /// Whether bytes of an unfinished line or event are held: a stream that ends here was cut mid-event.
    bool pending() const { return !line_.empty() || has_data_ || !type_.empty(); }

  private:
    void line(std::vector<sse_event>& out);

    std::string line_;  ///< the current line, up to its end
    std::string data_;  ///< the data of the event being built
    std::string type_;  ///< its `event:` field, empty for "message"
    bool has_data_ = false;
    bool after_cr_ = false;  ///< the last byte was a CR: an LF right after it ends no second line
    size_t bom_ = 0;         ///< bytes of a leading byte order mark matched so far (3 = done or none)
};

}  // namespace zmoe::cli
