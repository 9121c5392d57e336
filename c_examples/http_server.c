/*
 * A minimal HTTP/1.1 server for docs/api.md's `POST /generate`, on 127.0.0.1, one request at a
 * time, one request per connection (every response carries `Connection: close`).
 *
 *   http_server MODEL.colibri PORT [MAX_REQUESTS [N_CTX]]
 *
 * PORT 0 picks a free port. Once listening it prints "listening on PORT" to stdout. With
 * MAX_REQUESTS > 0 it exits 0 after that many connections (answered or not); SIGINT/SIGTERM stop
 * it cleanly. N_CTX is each request's context length (default 0: the model's, capped at 4096).
 * One log line per request goes to stderr.
 *
 * Hostile input is expected: the request head is capped at 16 KiB (431), the body at 1 MiB
 * (413), each connection gets 10 s to send its request, the JSON parser checks the whole grammar
 * (nesting depth capped at 64, strings must be valid UTF-8), and every failure is a JSON error
 * object with the right status instead of a crash.
 */
#define _POSIX_C_SOURCE 200809L
#include <colibri.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEAD (16 * 1024)
#define MAX_BODY (1024 * 1024)
#define REQUEST_TIMEOUT_MS 10000
#define WRITE_TIMEOUT_MS 10000
#define DRAIN_TIMEOUT_MS 1000
#define MAX_DRAIN (4 * 1024 * 1024)
#define MAX_DEPTH 64
#define MAX_NUMBER_CHARS 512

static volatile sig_atomic_t stop_requested = 0;

static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

/* ------------------------------------------------------------------------------------------- */
/* Growable byte buffer.                                                                        */

typedef struct {
    char *data;
    size_t len, cap;
    int oom;
} strbuf;

static void sb_put(strbuf *b, const void *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *grown;
        while (cap < b->len + n + 1) cap *= 2;
        grown = (char *)realloc(b->data, cap);
        if (grown == NULL) {
            b->oom = 1;
            return;
        }
        b->data = grown;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void sb_puts(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(strbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp)
        b->oom = 1; /* only used for short numeric fragments */
    else
        sb_put(b, tmp, (size_t)n);
}

static void sb_free(strbuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
}

/* ------------------------------------------------------------------------------------------- */
/* UTF-8 and JSON output.                                                                       */

/* Length of the valid UTF-8 sequence at p (n bytes available), 0 when invalid (overlong forms,
 * surrogates and code points above U+10FFFF are invalid). */
static size_t utf8_len(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return n >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (n < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0; /* overlong */
        if (c == 0xED && p[1] >= 0xA0) return 0; /* surrogate */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (n < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0; /* overlong */
        if (c == 0xF4 && p[1] >= 0x90) return 0; /* above U+10FFFF */
        return 4;
    }
    return 0;
}

/* Append s as a JSON string literal. Invalid UTF-8 (never produced by the library, but this is
 * the last line of defence) becomes U+FFFD. */
static void sb_json_string(strbuf *b, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    sb_put(b, "\"", 1);
    while (i < n) {
        unsigned c = p[i];
        size_t l;
        switch (c) {
        case '"': sb_put(b, "\\\"", 2); i++; continue;
        case '\\': sb_put(b, "\\\\", 2); i++; continue;
        case '\n': sb_put(b, "\\n", 2); i++; continue;
        case '\r': sb_put(b, "\\r", 2); i++; continue;
        case '\t': sb_put(b, "\\t", 2); i++; continue;
        case '\b': sb_put(b, "\\b", 2); i++; continue;
        case '\f': sb_put(b, "\\f", 2); i++; continue;
        default: break;
        }
        if (c < 0x20 || c == 0x7F) {
            sb_printf(b, "\\u%04x", c);
            i++;
            continue;
        }
        l = utf8_len(p + i, n - i);
        if (l == 0) {
            sb_puts(b, "\\ufffd");
            i++;
            continue;
        }
        sb_put(b, p + i, l);
        i += l;
    }
    sb_put(b, "\"", 1);
}

/* docs/api.md's error object. */
static void error_body(strbuf *b, const char *message, const char *type, const char *param) {
    sb_puts(b, "{\"error\": {\"message\": ");
    sb_json_string(b, message, strlen(message));
    sb_puts(b, ", \"type\": ");
    sb_json_string(b, type, strlen(type));
    sb_puts(b, ", \"param\": ");
    if (param)
        sb_json_string(b, param, strlen(param));
    else
        sb_puts(b, "null");
    sb_puts(b, ", \"code\": null}}");
}

/* ------------------------------------------------------------------------------------------- */
/* Socket I/O with deadlines.                                                                   */

static long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Wait for `events` on fd until the deadline: 1 ready, 0 timed out or stopped, -1 error. */
static int wait_fd(int fd, short events, long deadline) {
    for (;;) {
        struct pollfd pfd;
        long left = deadline - now_ms();
        int r;
        if (left <= 0) return 0;
        pfd.fd = fd;
        pfd.events = events;
        pfd.revents = 0;
        r = poll(&pfd, 1, (int)(left > 1000 ? 1000 : left));
        if (r < 0 && errno != EINTR) return -1;
        if (stop_requested) return 0;
        if (r > 0) return 1;
    }
}

/* Read up to cap bytes: >0 bytes read, 0 end of stream, -1 error or timeout. */
static long read_some(int fd, char *buf, size_t cap, long deadline) {
    for (;;) {
        ssize_t n;
        int w = wait_fd(fd, POLLIN, deadline);
        if (w <= 0) return -1;
        n = recv(fd, buf, cap, 0);
        if (n >= 0) return (long)n;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    }
}

static int write_all(int fd, const char *buf, size_t n, long deadline) {
    while (n > 0) {
        ssize_t w;
        if (wait_fd(fd, POLLOUT, deadline) <= 0) return -1;
        w = send(fd, buf, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
            return -1;
        }
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

static const char *reason_phrase(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    default: return "Error";
    }
}

static void send_response(int fd, int status, const char *extra_headers, const strbuf *body, int head_only) {
    char head[512];
    long deadline = now_ms() + WRITE_TIMEOUT_MS;
    size_t body_len = body->oom ? 0 : body->len;
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %lu\r\n"
                     "Connection: close\r\n%s\r\n",
                     status, reason_phrase(status), (unsigned long)body_len, extra_headers ? extra_headers : "");
    if (n < 0 || (size_t)n >= sizeof head) return;
    if (write_all(fd, head, (size_t)n, deadline) != 0) return;
    if (!head_only && body_len > 0) write_all(fd, body->data, body_len, deadline);
}

/* Send an error response built from the error object. */
static void send_error(int fd, int status, const char *message, const char *param, const char *extra_headers,
                       int head_only) {
    strbuf b = {NULL, 0, 0, 0};
    error_body(&b, message, status >= 500 ? "server_error" : "invalid_request_error", param);
    send_response(fd, status, extra_headers, &b, head_only);
    sb_free(&b);
}

/* After answering early (body unread, or a client that keeps sending), stop writing and read
 * what the client still sends for a short while, so closing does not reset the connection
 * before the client has read the answer. */
static void lingering_close(int fd) {
    char sink[4096];
    long deadline = now_ms() + DRAIN_TIMEOUT_MS, drained = 0;
    shutdown(fd, SHUT_WR);
    while (drained < MAX_DRAIN) {
        long n = read_some(fd, sink, sizeof sink, deadline);
        if (n <= 0) break;
        drained += n;
    }
}

/* ------------------------------------------------------------------------------------------- */
/* JSON request parser.                                                                         */

typedef enum { J_NULL, J_BOOL, J_NUMBER, J_STRING, J_ARRAY, J_OBJECT } jtype;

typedef struct {
    jtype type;
    int boolean;
    /* numbers */
    double number;       /* the value (±inf when out of double range) */
    int integer_literal; /* written without fraction or exponent */
    int negative;
    uint64_t u64;        /* |value| of an integer literal, saturated */
    int u64_overflow;
    /* strings (only when the caller asked for the text) */
    strbuf text;
} jvalue;

typedef struct {
    const char *p, *end, *start;
    char syntax[160]; /* first syntax error, "" when none */
} jparser;

static int jfail(jparser *j, const char *what) {
    if (j->syntax[0] == '\0')
        snprintf(j->syntax, sizeof j->syntax, "malformed JSON at byte %ld: %s", (long)(j->p - j->start), what);
    return 0;
}

static void skip_ws(jparser *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    int i;
    for (i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return 0;
    }
    *out = v;
    return 1;
}

static void put_utf8(strbuf *b, unsigned cp) {
    unsigned char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (unsigned char)(0xC0 | (cp >> 6));
        u[1] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (unsigned char)(0xE0 | (cp >> 12));
        u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (unsigned char)(0xF0 | (cp >> 18));
        u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    sb_put(b, u, n);
}

/* A string starting at the opening quote; decoded into out when out is not NULL. */
static int parse_string(jparser *j, strbuf *out) {
    j->p++; /* opening quote */
    for (;;) {
        unsigned char c;
        if (j->p >= j->end) return jfail(j, "unterminated string");
        c = (unsigned char)*j->p;
        if (c == '"') {
            j->p++;
            return 1;
        }
        if (c < 0x20) return jfail(j, "control character in a string");
        if (c == '\\') {
            unsigned cp;
            if (j->end - j->p < 2) return jfail(j, "unterminated escape");
            switch (j->p[1]) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u':
                if (j->end - j->p < 6 || !hex4(j->p + 2, &cp)) return jfail(j, "bad \\u escape");
                if (cp >= 0xDC00 && cp <= 0xDFFF) return jfail(j, "lone low surrogate in \\u escape");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    unsigned lo;
                    if (j->end - j->p < 12 || j->p[6] != '\\' || j->p[7] != 'u' || !hex4(j->p + 8, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF)
                        return jfail(j, "lone high surrogate in \\u escape");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    j->p += 6;
                }
                j->p += 4;
                break;
            default: return jfail(j, "unknown escape");
            }
            j->p += 2;
            if (out) put_utf8(out, cp);
            continue;
        }
        if (c < 0x80) {
            if (out) sb_put(out, j->p, 1);
            j->p++;
        } else {
            size_t l = utf8_len((const unsigned char *)j->p, (size_t)(j->end - j->p));
            if (l == 0) return jfail(j, "invalid UTF-8 in a string");
            if (out) sb_put(out, j->p, l);
            j->p += l;
        }
    }
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int parse_number(jparser *j, jvalue *v) {
    const char *s = j->p;
    char copy[MAX_NUMBER_CHARS + 1];
    size_t n;
    v->type = J_NUMBER;
    v->integer_literal = 1;
    v->negative = 0;
    v->u64 = 0;
    v->u64_overflow = 0;
    if (j->p < j->end && *j->p == '-') {
        v->negative = 1;
        j->p++;
    }
    if (j->p >= j->end || !is_digit(*j->p)) return jfail(j, "bad number");
    if (*j->p == '0') {
        j->p++;
    } else {
        while (j->p < j->end && is_digit(*j->p)) {
            unsigned d = (unsigned)(*j->p - '0');
            if (v->u64 > (UINT64_MAX - d) / 10)
                v->u64_overflow = 1;
            else
                v->u64 = v->u64 * 10 + d;
            j->p++;
        }
    }
    if (j->p < j->end && *j->p == '.') {
        v->integer_literal = 0;
        j->p++;
        if (j->p >= j->end || !is_digit(*j->p)) return jfail(j, "bad number fraction");
        while (j->p < j->end && is_digit(*j->p)) j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        v->integer_literal = 0;
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
        if (j->p >= j->end || !is_digit(*j->p)) return jfail(j, "bad number exponent");
        while (j->p < j->end && is_digit(*j->p)) j->p++;
    }
    n = (size_t)(j->p - s);
    if (n > MAX_NUMBER_CHARS) return jfail(j, "number too long");
    memcpy(copy, s, n);
    copy[n] = '\0';
    v->number = strtod(copy, NULL); /* the grammar is checked; the "C" locale is never changed */
    return 1;
}

static int literal(jparser *j, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0) return jfail(j, "unexpected character");
    j->p += n;
    return 1;
}

/* Any JSON value; containers are checked and skipped. want_text: decode a string into v->text. */
static int parse_value(jparser *j, jvalue *v, int depth, int want_text) {
    skip_ws(j);
    if (j->p >= j->end) return jfail(j, "unexpected end of input");
    switch (*j->p) {
    case '"':
        v->type = J_STRING;
        return parse_string(j, want_text ? &v->text : NULL);
    case 't': v->type = J_BOOL; v->boolean = 1; return literal(j, "true");
    case 'f': v->type = J_BOOL; v->boolean = 0; return literal(j, "false");
    case 'n': v->type = J_NULL; return literal(j, "null");
    case '[': {
        jvalue item;
        v->type = J_ARRAY;
        if (depth >= MAX_DEPTH) return jfail(j, "nested too deeply");
        j->p++;
        skip_ws(j);
        if (j->p < j->end && *j->p == ']') {
            j->p++;
            return 1;
        }
        for (;;) {
            if (!parse_value(j, &item, depth + 1, 0)) return 0;
            skip_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == ']') {
                j->p++;
                return 1;
            }
            return jfail(j, "expected ',' or ']'");
        }
    }
    case '{': {
        jvalue item;
        v->type = J_OBJECT;
        if (depth >= MAX_DEPTH) return jfail(j, "nested too deeply");
        j->p++;
        skip_ws(j);
        if (j->p < j->end && *j->p == '}') {
            j->p++;
            return 1;
        }
        for (;;) {
            skip_ws(j);
            if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a string key");
            if (!parse_string(j, NULL)) return 0;
            skip_ws(j);
            if (j->p >= j->end || *j->p != ':') return jfail(j, "expected ':'");
            j->p++;
            if (!parse_value(j, &item, depth + 1, 0)) return 0;
            skip_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == '}') {
                j->p++;
                return 1;
            }
            return jfail(j, "expected ',' or '}'");
        }
    }
    default:
        if (*j->p == '-' || is_digit(*j->p)) return parse_number(j, v);
        return jfail(j, "unexpected character");
    }
}

/* The fields of a generate request, with docs/api.md's defaults. */
typedef struct {
    strbuf prompt;
    int have_prompt;
    uint64_t max_tokens; /* saturated */
    float temperature, top_p, min_p, repetition_penalty;
    uint64_t top_k; /* saturated */
    uint64_t seed;
    int ignore_eos;
    unsigned seen; /* known fields met so far (field_bit) */
    /* first semantic error */
    char error[200];
    const char *error_param;
} gen_request;

static const char *const FIELDS[] = {"prompt", "max_tokens", "temperature", "top_k", "top_p",
                                      "min_p", "repetition_penalty", "seed", "ignore_eos"};

/* The bit of a known field (0 for unknown ones), for duplicate detection. */
static unsigned field_bit(const char *key) {
    unsigned i;
    for (i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++)
        if (strcmp(key, FIELDS[i]) == 0) return 1u << i;
    return 0;
}

static const char *field_name(unsigned bit) {
    unsigned i;
    for (i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++)
        if (bit == 1u << i) return FIELDS[i];
    return "";
}

/* Record "'<param>' <rule>" as the request's error, unless one is recorded already. */
static void field_error(gen_request *r, const char *param, const char *rule) {
    if (r->error[0] != '\0') return;
    snprintf(r->error, sizeof r->error, "'%s' %s", param, rule);
    r->error_param = param;
}

/* An integer ≥ 0, written as one (no fraction or exponent: 2.0 and 1e3 are not integers, as
 * for Python's json and serde). saturate: huge values become UINT64_MAX instead of an error. */
static int want_uint(gen_request *r, const char *param, const jvalue *v, int saturate, uint64_t *out) {
    if (v->type != J_NUMBER || !v->integer_literal) {
        field_error(r, param, "must be an integer");
        return 0;
    }
    if (v->negative && (v->u64 != 0 || v->u64_overflow)) {
        field_error(r, param, "must be >= 0");
        return 0;
    }
    if (v->u64_overflow && !saturate) {
        field_error(r, param, "is too large (at most 18446744073709551615)");
        return 0;
    }
    *out = v->u64_overflow ? UINT64_MAX : v->u64;
    return 1;
}

/* A number, range-checked by the caller on the double (as the other hosts do), then stored as
 * the float the library takes. */
static int want_number(gen_request *r, const char *param, const jvalue *v, double *out) {
    if (v->type != J_NUMBER) {
        field_error(r, param, "must be a number");
        return 0;
    }
    *out = v->number; /* ±inf when out of double range: the range checks reject it */
    return 1;
}

/* The float nearest to d, which is finite and checked; beyond FLT_MAX becomes ±FLT_MAX (a plain
 * conversion would be undefined behaviour). */
static float to_float(double d) { return d > FLT_MAX ? FLT_MAX : d < -FLT_MAX ? -FLT_MAX : (float)d; }

static void parse_request(const char *body, size_t len, gen_request *r, char *syntax, size_t syntax_cap) {
    jparser j;
    j.p = j.start = body;
    j.end = body + len;
    j.syntax[0] = '\0';
    syntax[0] = '\0';
    skip_ws(&j);
    if (j.p >= j.end || *j.p != '{') {
        snprintf(syntax, syntax_cap, "the request body must be a JSON object");
        return;
    }
    j.p++;
    skip_ws(&j);
    if (j.p < j.end && *j.p == '}') {
        j.p++;
    } else {
        for (;;) {
            strbuf key = {NULL, 0, 0, 0};
            jvalue v;
            double d = 0.0;
            int ok;
            const char *k;
            skip_ws(&j);
            if (j.p >= j.end || *j.p != '"') {
                jfail(&j, "expected a string key");
                break;
            }
            ok = parse_string(&j, &key);
            if (ok) {
                skip_ws(&j);
                if (j.p >= j.end || *j.p != ':') ok = jfail(&j, "expected ':'");
                else j.p++;
            }
            memset(&v, 0, sizeof v);
            k = key.data ? key.data : "";
            if (ok) ok = parse_value(&j, &v, 1, strcmp(k, "prompt") == 0);
            if (ok && !key.oom && !v.text.oom && strlen(k) == key.len) { /* a key with a NUL is unknown */
                /* A known field given twice is rejected (as serde does), not "last one wins". */
                unsigned bit = field_bit(k);
                if (bit & r->seen) field_error(r, field_name(bit), "is given twice");
                r->seen |= bit;
                if (strcmp(k, "prompt") == 0) {
                    if (v.type != J_STRING) {
                        field_error(r, "prompt", "must be a string");
                    } else {
                        sb_free(&r->prompt);
                        r->prompt = v.text;
                        memset(&v.text, 0, sizeof v.text);
                        if (r->prompt.data == NULL) sb_put(&r->prompt, "", 0);
                        r->have_prompt = 1;
                    }
                } else if (strcmp(k, "max_tokens") == 0) {
                    want_uint(r, "max_tokens", &v, 1, &r->max_tokens);
                } else if (strcmp(k, "temperature") == 0) {
                    if (want_number(r, "temperature", &v, &d) && !(d >= 0.0 && isfinite(d)))
                        field_error(r, "temperature", "must be a finite number >= 0");
                    r->temperature = to_float(d);
                } else if (strcmp(k, "top_k") == 0) {
                    want_uint(r, "top_k", &v, 1, &r->top_k);
                } else if (strcmp(k, "top_p") == 0) {
                    if (want_number(r, "top_p", &v, &d) && !(d > 0.0 && d <= 1.0))
                        field_error(r, "top_p", "must be in (0, 1]");
                    r->top_p = to_float(d);
                } else if (strcmp(k, "min_p") == 0) {
                    if (want_number(r, "min_p", &v, &d) && !(d >= 0.0 && d <= 1.0))
                        field_error(r, "min_p", "must be in [0, 1]");
                    r->min_p = to_float(d);
                } else if (strcmp(k, "repetition_penalty") == 0) {
                    if (want_number(r, "repetition_penalty", &v, &d) && !(d > 0.0 && isfinite(d)))
                        field_error(r, "repetition_penalty", "must be a finite number > 0");
                    r->repetition_penalty = to_float(d);
                } else if (strcmp(k, "seed") == 0) {
                    want_uint(r, "seed", &v, 0, &r->seed);
                } else if (strcmp(k, "ignore_eos") == 0) {
                    if (v.type != J_BOOL)
                        field_error(r, "ignore_eos", "must be a boolean");
                    else
                        r->ignore_eos = v.boolean;
                }
                /* unknown fields are ignored */
            } else if (ok) {
                ok = jfail(&j, "out of memory");
            }
            sb_free(&key);
            sb_free(&v.text);
            if (!ok) break;
            skip_ws(&j);
            if (j.p < j.end && *j.p == ',') {
                j.p++;
                continue;
            }
            if (j.p < j.end && *j.p == '}') {
                j.p++;
                break;
            }
            jfail(&j, "expected ',' or '}'");
            break;
        }
    }
    if (j.syntax[0] == '\0') {
        skip_ws(&j);
        if (j.p != j.end) jfail(&j, "trailing characters after the object");
    }
    if (j.syntax[0] != '\0') snprintf(syntax, syntax_cap, "%s", j.syntax);
}

/* ------------------------------------------------------------------------------------------- */
/* Generation.                                                                                  */

typedef struct {
    strbuf text;
    int32_t *tokens;
    size_t n_tokens, cap;
    int oom;
} gen_output;

static int32_t on_token(void *userdata, int32_t token, const char *text, size_t text_len) {
    gen_output *o = (gen_output *)userdata;
    sb_put(&o->text, text, text_len);
    if (token >= 0) {
        if (o->n_tokens == o->cap) {
            size_t cap = o->cap ? o->cap * 2 : 64;
            int32_t *grown = (int32_t *)realloc(o->tokens, cap * sizeof *grown);
            if (grown == NULL) {
                o->oom = 1;
                return 1;
            }
            o->tokens = grown;
            o->cap = cap;
        }
        o->tokens[o->n_tokens++] = token;
    }
    return o->text.oom ? 1 : 0;
}

/* Handle a parsed request: 200 with the result, or an error response. Returns the status. */
static int run_generate(int fd, const colibri_model *model, uint32_t n_ctx_param, const gen_request *r) {
    colibri_session *session = NULL;
    colibri_session_params params;
    colibri_sampler_params sp;
    gen_output out = {{NULL, 0, 0, 0}, NULL, 0, 0, 0};
    strbuf body = {NULL, 0, 0, 0};
    int32_t *prompt = NULL;
    size_t n_prompt = 0, cap, n_generated = 0, position = 0, n_ctx = 0, i;
    uint64_t max_tokens;
    colibri_status st;
    const char *finish;
    char msg[600];
    int status = 500;

    cap = r->prompt.len + 16;
    prompt = (int32_t *)malloc(cap * sizeof *prompt);
    if (prompt == NULL) goto oom;
    st = colibri_tokenize(model, r->prompt.data, r->prompt.len, 1, prompt, cap, &n_prompt);
    if (st == COLIBRI_STATUS_BUFFER_TOO_SMALL) {
        int32_t *grown = (int32_t *)realloc(prompt, (n_prompt + 1) * sizeof *prompt);
        if (grown == NULL) goto oom;
        prompt = grown;
        cap = n_prompt + 1;
        st = colibri_tokenize(model, r->prompt.data, r->prompt.len, 1, prompt, cap, &n_prompt);
    }
    if (st != COLIBRI_STATUS_OK) {
        snprintf(msg, sizeof msg, "tokenizing the prompt failed: %s: %s", colibri_status_str(st),
                 colibri_last_error_message());
        status = st == COLIBRI_STATUS_INVALID_ARGUMENT ? 400 : 500;
        send_error(fd, status, msg, status == 400 ? "prompt" : NULL, NULL, 0);
        goto done;
    }
    if (n_prompt == 0) {
        status = 400;
        send_error(fd, status, "the prompt encodes to no tokens", "prompt", NULL, 0);
        goto done;
    }
    colibri_session_params_init(&params);
    params.n_ctx = n_ctx_param;
    if ((st = colibri_session_new(model, &params, &session)) != COLIBRI_STATUS_OK ||
        (st = colibri_session_position(session, &position, &n_ctx)) != COLIBRI_STATUS_OK) {
        snprintf(msg, sizeof msg, "cannot create a session: %s: %s", colibri_status_str(st),
                 colibri_last_error_message());
        send_error(fd, 500, msg, NULL, NULL, 0);
        goto done;
    }
    if (n_prompt >= n_ctx) {
        snprintf(msg, sizeof msg, "the prompt of %lu tokens does not fit the context of %lu tokens",
                 (unsigned long)n_prompt, (unsigned long)n_ctx);
        status = 400;
        send_error(fd, status, msg, "prompt", NULL, 0);
        goto done;
    }

    /* Clamp to the context: no generation can be longer (it stops with finish_reason "context"). */
    max_tokens = r->max_tokens < (uint64_t)n_ctx ? r->max_tokens : (uint64_t)n_ctx;
    colibri_sampler_params_init(&sp);
    sp.temperature = r->temperature;
    sp.top_k = r->top_k > 2147483647u ? 2147483647 : (int32_t)r->top_k;
    sp.top_p = r->top_p;
    sp.min_p = r->min_p;
    sp.repetition_penalty = r->repetition_penalty;
    sp.seed = r->seed;
    sp.ignore_eos = r->ignore_eos;
    sp.max_tokens = (int32_t)max_tokens;
    st = colibri_generate(session, prompt, n_prompt, &sp, on_token, &out, NULL, 0, &n_generated);
    if (out.oom || out.text.oom) goto oom;
    if (st != COLIBRI_STATUS_OK) {
        snprintf(msg, sizeof msg, "generation failed: %s: %s", colibri_status_str(st), colibri_last_error_message());
        status = st == COLIBRI_STATUS_INVALID_ARGUMENT || st == COLIBRI_STATUS_CONTEXT_FULL ? 400 : 500;
        send_error(fd, status, msg, NULL, NULL, 0);
        goto done;
    }
    if ((st = colibri_session_position(session, &position, &n_ctx)) != COLIBRI_STATUS_OK) {
        snprintf(msg, sizeof msg, "colibri_session_position: %s: %s", colibri_status_str(st),
                 colibri_last_error_message());
        send_error(fd, 500, msg, NULL, NULL, 0);
        goto done;
    }
    /* colibri_generate does not say why it stopped. The callback saw every generated token
     * except an end-of-sequence token that stopped the generation (libraries before 0.1.0's
     * release counted that one in n_generated, hence the second test). Short of max_tokens, a
     * full context means "context" (ambiguous only when the end-of-sequence token is sampled at
     * the very last position), anything else an end-of-sequence token. */
    if ((uint64_t)out.n_tokens >= max_tokens)
        finish = "length";
    else if (n_generated > out.n_tokens)
        finish = "stop";
    else if (position >= n_ctx)
        finish = "context";
    else
        finish = "stop";

    sb_puts(&body, "{\"text\": ");
    sb_json_string(&body, out.text.data ? out.text.data : "", out.text.len);
    sb_puts(&body, ", \"tokens\": [");
    for (i = 0; i < out.n_tokens; i++) sb_printf(&body, i ? ", %ld" : "%ld", (long)out.tokens[i]);
    sb_printf(&body, "], \"prompt_tokens\": %lu, \"completion_tokens\": %lu, \"finish_reason\": \"%s\"}",
              (unsigned long)n_prompt, (unsigned long)out.n_tokens, finish);
    if (body.oom) goto oom;
    status = 200;
    send_response(fd, 200, NULL, &body, 0);
    goto done;

oom:
    status = 500;
    send_error(fd, status, "out of memory", NULL, NULL, 0);
done:
    sb_free(&body);
    sb_free(&out.text);
    free(out.tokens);
    free(prompt);
    colibri_session_free(session);
    return status;
}

/* ------------------------------------------------------------------------------------------- */
/* HTTP.                                                                                        */

static int lower(int c) { return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c; }

static int header_is(const char *name, size_t n, const char *want) {
    size_t i;
    if (strlen(want) != n) return 0;
    for (i = 0; i < n; i++)
        if (lower((unsigned char)name[i]) != want[i]) return 0;
    return 1;
}

static int is_tchar(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit((char)c) || (c != 0 && strchr("!#$%&'*+-.^_`|~", c));
}

/* Serve one connection: read one request, answer it. Returns the status sent (0: none). */
static int serve(int fd, const colibri_model *model, uint32_t n_ctx, char *head, char *method_out, size_t method_cap, char *path_out,
                 size_t path_cap) {
    long deadline = now_ms() + REQUEST_TIMEOUT_MS;
    size_t used = 0, head_len = 0, body_have, content_length = 0, i;
    int have_length = 0, chunked = 0, expect_continue = 0, head_only, status;
    char *line, *eol, *sp1, *sp2, *body, *headers;
    gen_request req;
    char syntax[200];

    method_out[0] = path_out[0] = '\0';
    /* 1. The request head, up to the empty line. */
    for (;;) {
        long n;
        if (used == MAX_HEAD) {
            send_error(fd, 431, "the request head is larger than 16 KiB", NULL, NULL, 0);
            lingering_close(fd);
            return 431;
        }
        n = read_some(fd, head + used, MAX_HEAD - used, deadline);
        if (n < 0) {
            if (used > 0) send_error(fd, 408, "timed out waiting for the request", NULL, NULL, 0);
            return used > 0 ? 408 : 0;
        }
        if (n == 0) return 0; /* the client went away mid-request: nobody to answer */
        used += (size_t)n;
        head[used] = '\0';
        {
            /* The head ends at the first empty line; bare LF line ends are tolerated. */
            char *crlf = strstr(head, "\r\n\r\n"), *lf = strstr(head, "\n\n");
            if (crlf != NULL && (lf == NULL || crlf + 4 <= lf + 2)) {
                head_len = (size_t)(crlf - head) + 4;
                break;
            }
            if (lf != NULL) {
                head_len = (size_t)(lf - head) + 2;
                break;
            }
        }
        if (strlen(head) != used) { /* a NUL byte in the head */
            send_error(fd, 400, "malformed request: NUL byte in the request head", NULL, NULL, 0);
            lingering_close(fd);
            return 400;
        }
    }
    if (memchr(head, '\0', head_len) != NULL) {
        send_error(fd, 400, "malformed request: NUL byte in the request head", NULL, NULL, 0);
        lingering_close(fd);
        return 400;
    }

    /* 2. Request line: METHOD SP TARGET SP HTTP/1.x */
    line = head;
    eol = strchr(line, '\n'); /* present: the head ends with an empty line */
    headers = eol + 1;
    *eol = '\0';
    if (eol > line && eol[-1] == '\r') eol[-1] = '\0';
    sp1 = strchr(line, ' ');
    sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (sp1 == NULL || sp2 == NULL || sp1 == line || sp2 == sp1 + 1 || strchr(sp2 + 1, ' ') != NULL ||
        (strcmp(sp2 + 1, "HTTP/1.1") != 0 && strcmp(sp2 + 1, "HTTP/1.0") != 0)) {
        send_error(fd, 400, "malformed request line", NULL, NULL, 0);
        lingering_close(fd);
        return 400;
    }
    *sp1 = *sp2 = '\0';
    for (i = 0; line[i]; i++)
        if (!is_tchar((unsigned char)line[i])) break;
    for (eol = sp1 + 1; *eol; eol++)
        if ((unsigned char)*eol <= 0x20 || (unsigned char)*eol >= 0x7F) break;
    if (line[i] != '\0' || *eol != '\0') {
        send_error(fd, 400, "malformed request line", NULL, NULL, 0);
        lingering_close(fd);
        return 400;
    }
    snprintf(method_out, method_cap, "%s", line);
    snprintf(path_out, path_cap, "%s", sp1 + 1);
    head_only = strcmp(line, "HEAD") == 0;

    /* 3. Header fields. */
    line = headers;
    for (;;) {
        char *colon, *value, *vend, *name = line;
        eol = strchr(line, '\n');
        if (eol == NULL) break;
        *eol = '\0';
        if (eol > line && eol[-1] == '\r') eol[-1] = '\0';
        line = eol + 1;
        if (name[0] == '\0') break; /* the empty line */
        colon = strchr(name, ':');
        if (colon == NULL || colon == name) {
            send_error(fd, 400, "malformed header field", NULL, NULL, head_only);
            lingering_close(fd);
            return 400;
        }
        for (value = name; value < colon; value++)
            if (!is_tchar((unsigned char)*value)) break;
        if (value != colon) { /* whitespace before ':' or obsolete line folding */
            send_error(fd, 400, "malformed header field", NULL, NULL, head_only);
            lingering_close(fd);
            return 400;
        }
        value = colon + 1;
        while (*value == ' ' || *value == '\t') value++;
        vend = value + strlen(value);
        while (vend > value && (vend[-1] == ' ' || vend[-1] == '\t')) *--vend = '\0';
        if (header_is(name, (size_t)(colon - name), "content-length")) {
            size_t v = 0;
            int too_big = 0;
            char *d = value;
            if (*d == '\0') d = NULL;
            for (; d && *d; d++) {
                if (!is_digit(*d)) {
                    d = NULL;
                    break;
                }
                if (v > ((size_t)MAX_BODY * 16))
                    too_big = 1;
                else
                    v = v * 10 + (size_t)(*d - '0');
            }
            if (d == NULL || (have_length && (too_big || v != content_length))) {
                send_error(fd, 400, "malformed or conflicting Content-Length", NULL, NULL, head_only);
                lingering_close(fd);
                return 400;
            }
            content_length = too_big ? (size_t)-1 : v;
            have_length = 1;
        } else if (header_is(name, (size_t)(colon - name), "transfer-encoding")) {
            chunked = 1;
        } else if (header_is(name, (size_t)(colon - name), "expect")) {
            if (header_is(value, strlen(value), "100-continue")) expect_continue = 1;
        }
    }

    /* 4. Route (on the whole target: path_out is only a copy for the log, maybe truncated). */
    {
        const char *target = sp1 + 1, *q = strchr(target, '?');
        size_t plen = q ? (size_t)(q - target) : strlen(target);
        if (plen != strlen("/generate") || memcmp(target, "/generate", plen) != 0) {
            send_error(fd, 404, "not found: this server has only POST /generate", NULL, NULL, head_only);
            lingering_close(fd);
            return 404;
        }
    }
    if (strcmp(method_out, "POST") != 0) {
        send_error(fd, 405, "method not allowed: use POST /generate", NULL, "Allow: POST\r\n", head_only);
        lingering_close(fd);
        return 405;
    }

    /* 5. Body framing. */
    if (chunked) {
        send_error(fd, 400, "Transfer-Encoding is not supported: send the body with a Content-Length", NULL, NULL, 0);
        lingering_close(fd);
        return 400;
    }
    if (!have_length) {
        send_error(fd, 400, "the request body must be a JSON object (no Content-Length)", NULL, NULL, 0);
        lingering_close(fd);
        return 400;
    }
    if (content_length > MAX_BODY) {
        send_error(fd, 413, "the request body is larger than 1 MiB", NULL, NULL, 0);
        lingering_close(fd);
        return 413;
    }
    body = (char *)malloc(content_length + 1);
    if (body == NULL) {
        send_error(fd, 500, "out of memory", NULL, NULL, 0);
        lingering_close(fd);
        return 500;
    }
    body_have = used - head_len < content_length ? used - head_len : content_length;
    memcpy(body, head + head_len, body_have);
    if (body_have < content_length && expect_continue) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        write_all(fd, cont, sizeof cont - 1, deadline);
    }
    while (body_have < content_length) {
        long n = read_some(fd, body + body_have, content_length - body_have, deadline);
        if (n <= 0) {
            free(body);
            if (n < 0) send_error(fd, 408, "timed out waiting for the request body", NULL, NULL, 0);
            return n < 0 ? 408 : 0;
        }
        body_have += (size_t)n;
    }
    body[content_length] = '\0';

    /* 6. Parse, validate, generate. */
    memset(&req, 0, sizeof req);
    req.max_tokens = 64;
    req.temperature = 0.8f;
    req.top_k = 40;
    req.top_p = 0.95f;
    req.min_p = 0.05f;
    req.repetition_penalty = 1.0f;
    req.seed = 0;
    req.ignore_eos = 0;
    parse_request(body, content_length, &req, syntax, sizeof syntax);
    free(body);
    if (syntax[0] != '\0') {
        send_error(fd, 400, syntax, NULL, NULL, 0);
        status = 400;
    } else if (req.error[0] != '\0') {
        send_error(fd, 400, req.error, req.error_param, NULL, 0);
        status = 400;
    } else if (!req.have_prompt) {
        send_error(fd, 400, "missing required field 'prompt'", "prompt", NULL, 0);
        status = 400;
    } else {
        status = run_generate(fd, model, n_ctx, &req);
    }
    sb_free(&req.prompt);
    return status;
}

static int parse_uint(const char *s, unsigned long max, unsigned long *out) {
    char *end;
    unsigned long v;
    if (!is_digit(s[0])) return 0;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > max) return 0;
    *out = v;
    return 1;
}

int main(int argc, char **argv) {
    colibri_model *model = NULL;
    colibri_status st;
    struct sockaddr_in addr;
    socklen_t addr_len = sizeof addr;
    struct sigaction sa;
    unsigned long port, max_requests = 0, served = 0, n_ctx = 0;
    int lfd = -1, one = 1, rc = 1;
    char *head = NULL;

    if (argc < 3 || argc > 5 || !parse_uint(argv[2], 65535, &port) ||
        (argc >= 4 && !parse_uint(argv[3], 1000000000UL, &max_requests)) ||
        (argc == 5 && !parse_uint(argv[4], 1UL << 30, &n_ctx))) {
        fprintf(stderr, "usage: %s MODEL.colibri PORT [MAX_REQUESTS [N_CTX]]   (PORT 0 = any free port)\n", argv[0]);
        return 2;
    }

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: accept() returns EINTR and the loop ends */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);

    if ((st = colibri_model_open(argv[1], NULL, &model)) != COLIBRI_STATUS_OK) {
        fprintf(stderr, "http_server: colibri_model_open: %s: %s\n", colibri_status_str(st),
                colibri_last_error_message());
        return 1;
    }
    head = (char *)malloc(MAX_HEAD + 1);
    if (head == NULL) {
        fprintf(stderr, "http_server: out of memory\n");
        goto done;
    }
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0) {
        perror("http_server: socket");
        goto done;
    }
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((unsigned short)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(lfd, 16) != 0 ||
        getsockname(lfd, (struct sockaddr *)&addr, &addr_len) != 0) {
        perror("http_server: bind/listen");
        goto done;
    }
    printf("listening on %u\n", (unsigned)ntohs(addr.sin_port));
    fflush(stdout);

    rc = 0;
    while (!stop_requested && (max_requests == 0 || served < max_requests)) {
        char method[24], path[200];
        int status, fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno != EINTR && errno != ECONNABORTED) perror("http_server: accept");
            continue;
        }
        served++;
        if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
            close(fd);
            continue;
        }
        status = serve(fd, model, (uint32_t)n_ctx, head, method, sizeof method, path, sizeof path);
        close(fd);
        fprintf(stderr, "http_server: %s %s -> %d\n", method[0] ? method : "-", path[0] ? path : "-", status);
    }

done:
    if (lfd >= 0) close(lfd);
    free(head);
    colibri_model_free(model);
    return rc;
}
