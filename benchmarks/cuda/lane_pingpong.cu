// What a client written in C could reach on rcuda's lane: no CUDA calls,
// no Python on this side, the same server.
//
//   lane_pingpong FD REQUEST_FILE ITERATIONS WARMUP_MS SPIN_US OUTFILE LAST_REPLY_FILE
//
// FD is a connected lane (rcuda/lane.py) lent by a Python client
// (DeviceChannel.lane_on_loan), inherited by this process.  REQUEST_FILE
// holds one whole lane message (prefix, header) that the client encoded: a
// synchronous call such as mem_info.  It is sent as is, again and again,
// and each reply read whole, as a fast path in C would: one write, a
// busy-poll of up to SPIN_US for the reply (the client's RCUDA_SPIN_US),
// then a blocking read.  After WARMUP_MS of untimed round trips,
// ITERATIONS are timed (nanoseconds, native int64, to OUTFILE); the last
// reply's header goes to LAST_REPLY_FILE for the caller to check.  Prints
// RESULT with the number of messages sent, which the lender adds to its count.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>
#include "bench_common.h"

static void fail(const char *what) {
    perror(what);
    exit(1);
}

// Bytes waiting to be parsed: what the last read brought beyond a message.
static std::vector<unsigned char> buffer(1 << 16);
static size_t have = 0;

static void read_more(int fd, long long spin_until) {
    for (;;) {
        bool spinning = now_ns() < spin_until;
        ssize_t got = recv(fd, buffer.data() + have, buffer.size() - have, spinning ? MSG_DONTWAIT : 0);
        if (got > 0) {
            have += (size_t)got;
            return;
        }
        if (got == 0) {
            fprintf(stderr, "the server closed the lane\n");
            exit(1);
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            if (spinning)
                sched_yield();
            continue;  // (a blocking read's SO_RCVTIMEO slice ran out: read again)
        }
        fail("recv");
    }
}

// One reply, whole: u32 header length, u32 frame count, u64 per frame, header, frames.
// Returns the message's length; its header's offset and length in `buffer` go to
// *header_at and *header_length.  The message stays in `buffer` until consume().
static size_t read_reply(int fd, long long spin_until, size_t *header_at, size_t *header_length) {
    while (have < 8)
        read_more(fd, spin_until);
    uint32_t header_bytes, frames;
    memcpy(&header_bytes, buffer.data(), 4);
    memcpy(&frames, buffer.data() + 4, 4);
    if (frames > 64) {
        fprintf(stderr, "reply with %u frames\n", frames);
        exit(1);
    }
    while (have < 8 + 8 * (size_t)frames)
        read_more(fd, spin_until);
    size_t total = 8 + 8 * (size_t)frames + header_bytes;
    for (uint32_t i = 0; i < frames; i++) {
        uint64_t length;
        memcpy(&length, buffer.data() + 8 + 8 * i, 8);
        total += length;
    }
    if (total > buffer.size())
        buffer.resize(total);
    while (have < total)
        read_more(fd, spin_until);
    *header_at = 8 + 8 * (size_t)frames;
    *header_length = header_bytes;
    return total;
}

static void consume(size_t count) {
    memmove(buffer.data(), buffer.data() + count, have - count);
    have -= count;
}

static void send_all(int fd, const std::vector<unsigned char> &message) {
    size_t sent = 0;
    while (sent < message.size()) {
        ssize_t n = send(fd, message.data() + sent, message.size() - sent, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            fail("send");
        }
        sent += (size_t)n;
    }
}

// One synchronous call: the request out, its reply in whole.  The reply's
// header is kept in `last_header`.
static long sent = 0;
static std::vector<unsigned char> last_header;

static void round_trip(int fd, const std::vector<unsigned char> &request, long long spin_ns) {
    long long started = now_ns();
    send_all(fd, request);
    sent++;
    size_t header_at, header_length;
    size_t total = read_reply(fd, started + spin_ns, &header_at, &header_length);
    last_header.assign(buffer.begin() + header_at, buffer.begin() + header_at + header_length);
    consume(total);
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: %s FD REQUEST_FILE ITERATIONS WARMUP_MS SPIN_US OUTFILE LAST_REPLY_FILE\n", argv[0]);
        return 2;
    }
    int fd = atoi(argv[1]);
    long iterations = atol(argv[3]);
    long long warmup_ns = atoll(argv[4]) * 1000000LL, spin_ns = atoll(argv[5]) * 1000LL;
    FILE *request_file = fopen(argv[2], "rb");
    if (!request_file)
        fail(argv[2]);
    std::vector<unsigned char> request(1 << 16);
    request.resize(fread(request.data(), 1, request.size(), request_file));
    fclose(request_file);
    if (request.size() < 8) {
        fprintf(stderr, "%s: not a lane message\n", argv[2]);
        return 2;
    }

    long warmup = 0;
    for (long long until = now_ns() + warmup_ns; warmup < 10 || now_ns() < until; warmup++)
        round_trip(fd, request, spin_ns);
    std::vector<long long> samples(iterations);
    for (long i = 0; i < iterations; i++) {
        long long started = now_ns();
        round_trip(fd, request, spin_ns);
        samples[i] = now_ns() - started;
    }
    if (have != 0) {
        fprintf(stderr, "%zu bytes past the last reply\n", have);
        return 1;
    }
    FILE *out = fopen(argv[6], "wb");
    if (!out || fwrite(samples.data(), sizeof(long long), iterations, out) != (size_t)iterations)
        fail(argv[6]);
    fclose(out);
    FILE *last = fopen(argv[7], "wb");
    if (!last || fwrite(last_header.data(), 1, last_header.size(), last) != last_header.size())
        fail(argv[7]);
    fclose(last);
    printf("RESULT {\"sent\": %ld, \"warmup_round_trips\": %ld}\n", sent, warmup);
    return 0;
}
