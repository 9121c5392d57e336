/*
 * A teaching example: colibri_generate behind a socket. Production serving is `colibri serve`
 * (OpenAI-compatible API, continuous batching, metrics, hardening); this file stays small on purpose.
 *
 *   http_server MODEL.colibri PORT [MAX_REQUESTS [N_CTX]]
 *
 * On 127.0.0.1:PORT (0: a free port, printed as "listening on PORT"), one connection at a time, one
 * request each; exits after MAX_REQUESTS connections (0: never). POST /generate takes docs/api.md's
 * fields as a flat JSON object (stop: one string; nested values: 400), generates on a fresh session
 * of N_CTX tokens (0: the model's, at most 4096) and answers with the library's finish_reason.
 * Other paths: 404, methods: 405. Limits: head 8 KiB (431), body 64 KiB (413), 10 s to send it.
 * Web pages cannot use it: a body must say Content-Type: application/json (415) and a request that
 * carries an Origin header is refused (403) — a browser lets any page POST text/plain to localhost.
 */
#define _POSIX_C_SOURCE 200809L
#include <colibri.h>
#include <arpa/inet.h>
#include <errno.h>
#include <float.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEAD 8192
#define MAX_BODY 65536
#define TIMEOUT_S 10

/* One connection at a time: its socket, its request line (for the log; HEAD gets no body), the
 * request, and the prompt's ids (at most one per byte, plus a few special tokens). */
static int client = -1;
static char method[16], path[256], req[MAX_HEAD + MAX_BODY + 1];
static int32_t prompt_ids[MAX_BODY + 64];

/* Send an answer (`body`: JSON). If the client left or stalled past SO_SNDTIMEO, so be it. */
static int respond(int status, const char *body) {
    const char *reason = status == 200 ? "OK" : status == 400 ? "Bad Request" : status == 404 ? "Not Found"
                       : status == 403 ? "Forbidden" : status == 405 ? "Method Not Allowed"
                       : status == 413 ? "Content Too Large" : status == 415 ? "Unsupported Media Type"
                       : status == 431 ? "Request Header Fields Too Large" : "Internal Server Error";
    dprintf(client, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %lu\r\n%sConnection: close\r\n"
            "\r\n%s", status, reason, (unsigned long)strlen(body), status == 405 ? "Allow: POST\r\n" : "",
            strcmp(method, "HEAD") != 0 ? body : "");
    return status;
}

/* `n` bytes as the inside of a JSON string (the library's text is UTF-8; controls escaped). */
static void put_json(FILE *f, const char *s, size_t n) {
    for (; n > 0; s++, n--)
        fprintf(f, *s == '"' || *s == '\\' ? "\\%c" : (unsigned char)*s < 0x20 ? "\\u%04x" : "%c", *s);
}

/* Answer with docs/api.md's error object (`param`: a field name or NULL); returns the status. */
static int fail(int status, const char *param, const char *message) {
    char body[1024], safe[768];
    size_t i;
    for (i = 0; message[i] != '\0' && i + 1 < sizeof safe; i++) /* JSON-safe: no quotes, backslashes, controls */
        safe[i] = message[i] == '"' || message[i] == '\\' || (unsigned char)message[i] < 0x20 ? '\'' : message[i];
    safe[i] = '\0';
    snprintf(body, sizeof body, "{\"error\": {\"message\": \"%s\", \"type\": \"%s\", \"param\": %s%s%s, "
             "\"code\": null}}", safe, status < 500 ? "invalid_request_error" : "server_error", param ? "\"" : "",
             param ? param : "null", param ? "\"" : "");
    return respond(status, body);
}

/* The body: a flat JSON object whose values are strings, numbers, true, false or null, read in place. */
static char *ws(char *p) { return p + strspn(p, " \t\r\n"); }
static int hex4(const char *s, unsigned *cp) { return strspn(s, "0123456789abcdefABCDEF") > 3 && sscanf(s, "%4x", cp); }

/* The string after the opening quote at (*p)[-1], unescaped in place (it only shrinks) and
 * NUL-terminated; *p moves past the closing quote. NULL when malformed. */
static char *scan_string(char **p, size_t *len) {
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    char *s = *p, *out = s, *start = s;
    const char *e;
    unsigned cp, lo;
    for (unsigned char ch; (ch = (unsigned char)*s++) != '"';) {
        if (ch < 0x20) return NULL; /* a raw control character, or the end of the body */
        if (ch != '\\') { *out++ = (char)ch; continue; }
        if (*s != '\0' && (e = strchr(from, *s)) != NULL) { *out++ = to[e - from]; s++; continue; }
        if (*s++ != 'u' || !hex4(s, &cp)) return NULL;
        s += 4;
        if (cp >= 0xD800 && cp < 0xDC00) { /* a surrogate pair such as \ud83d\ude00 */
            if (s[0] != '\\' || s[1] != 'u' || !hex4(s + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF) return NULL;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00), s += 6;
        } else if (cp >= 0xDC00 && cp < 0xE000) return NULL; /* a lone low surrogate */
        if (cp < 0x80) { *out++ = (char)cp; continue; } /* else UTF-8: a lead byte, then continuation bytes */
        *out++ = (char)(cp < 0x800 ? 0xC0 | cp >> 6 : cp < 0x10000 ? 0xE0 | cp >> 12 : 0xF0 | cp >> 18);
        if (cp >= 0x10000) *out++ = (char)(0x80 | (cp >> 12 & 0x3F));
        if (cp >= 0x800) *out++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *out++ = (char)(0x80 | (cp & 0x3F));
    }
    *out = '\0';
    *len = (size_t)(out - start), *p = s;
    return start;
}

/* What a request asks for. */
typedef struct { colibri_generate_params gp; const char *prompt, *stop; size_t len; } request; /* len: prompt's */

/* Take one field (type s, n, t, f, z: string, number, true, false, null) into r: NULL when it is
 * fine (or not ours), else the rule it breaks. */
static const char *apply(const char *k, char type, char *val, size_t len, request *r) {
    colibri_generate_params *gp = &r->gp;
    double d = type == 'n' ? strtod(val, NULL) : -1.0; /* -1: not a number (all fields here are >= 0) */
    int integer = type == 'n' && strspn(val, "0123456789") == len;
    int32_t i32 = integer && d < INT32_MAX ? (int32_t)d : INT32_MAX; /* larger: what the context allows */
    unsigned long long u = (errno = 0, strtoull(val, NULL, 10)); /* a seed has 64 bits: more than a double */
    if (type == 'z') return NULL; /* null: the default (a null prompt is a missing one) */
    if (!strcmp(k, "prompt")) return type == 's' && len ? (r->prompt = val, r->len = len, NULL) : "a non-empty string";
    if (!strcmp(k, "max_tokens")) return integer ? (gp->max_tokens = i32, NULL) : "an integer >= 0";
    if (!strcmp(k, "top_k")) return integer ? (gp->top_k = i32, NULL) : "an integer >= 0";
    if (!strcmp(k, "seed")) return integer && errno != ERANGE ? (gp->seed = u, NULL) : "an integer in [0, 2^64)";
    if (!strcmp(k, "temperature")) return d >= 0 && d <= FLT_MAX ? (gp->temperature = (float)d, NULL) : "a number >= 0";
    if (!strcmp(k, "top_p")) return d > 0 && d <= 1 ? (gp->top_p = (float)d, NULL) : "a number in (0, 1]";
    if (!strcmp(k, "min_p")) return d >= 0 && d <= 1 ? (gp->min_p = (float)d, NULL) : "a number in [0, 1]";
    if (!strcmp(k, "repetition_penalty"))
        return d > 0 && d <= FLT_MAX ? (gp->repetition_penalty = (float)d, NULL) : "a number > 0";
    if (!strcmp(k, "ignore_eos"))
        return type == 't' || type == 'f' ? (gp->ignore_eos = type == 't', NULL) : "true or false";
    if (!strcmp(k, "stop")) /* the library reads NUL-terminated stop strings: a \u0000 ends this one */
        return type == 's' ? (r->stop = val, gp->stop = &r->stop, gp->n_stop = 1, NULL) : "a string";
    return NULL;
}

/* Read the object in p[0..end) (a NUL at end) into r, field by field (a repeated key: its last
 * value counts); NULL, or what is wrong (and *param: the field at fault, when one is). */
static const char *scan_object(char *p, const char *end, request *r, const char **param) {
    static char msg[256];
    char *key, *val, *num_end, type;
    const char *rule;
    size_t len;
    int n;
    if (*(p = ws(p)) != '{') return "the body must be a JSON object";
    for (n = 0, p = ws(p + 1); *p != '}' || n > 0; n++, p = ws(p + 1)) { /* p: at a key, or at the } of {} */
        if (*p++ != '"' || (key = scan_string(&p, &len)) == NULL) return "expected a string key";
        if (*(p = ws(p)) != ':') return "expected ':' after a key";
        if (*(val = p = ws(p + 1)) == '"') {
            type = 's', p++;
            if ((val = scan_string(&p, &len)) == NULL) return "malformed string";
        } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
            type = 'n', len = strspn(p, "+-.eE0123456789"), p += len;
            (void)strtod(val, &num_end);
            if (num_end != p) return "malformed number"; /* 1-2, 1e, - */
        } else if (!strncmp(p, "true", 4) || !strncmp(p, "false", 5) || !strncmp(p, "null", 4)) {
            type = *p == 'n' ? 'z' : *p, p += *p == 'f' ? 5 : 4;
        } else {
            return *p == '{' || *p == '[' ? "nested objects and arrays are not supported" : "invalid JSON value";
        }
        if ((rule = apply(key, type, val, len, r)) != NULL) { /* the key is one of ours: no escaping needed */
            snprintf(msg, sizeof msg, "%s must be %s", *param = key, rule);
            return msg;
        }
        if (*(p = ws(p)) == '}') break;
        if (*p != ',') return "expected ',' or '}'";
    }
    return ws(p + 1) == end ? NULL : "unexpected characters after the object";
}

static int32_t on_token(void *userdata, int32_t token, const char *text, size_t len) {
    FILE **out = (FILE **)userdata; /* out[0]: the answer, inside its "text"; out[1]: the ids */
    put_json(out[0], text, len);
    if (token >= 0) fprintf(out[1], ftell(out[1]) > 0 ? ", %ld" : "%ld", (long)token); /* -1: a last flush of text */
    return ferror(out[0]) || ferror(out[1]); /* out of memory: stop (COLIBRI_FINISH_CALLBACK) */
}

/* docs/api.md's finish_reason by the library's (COLIBRI_FINISH_CALLBACK: on_token ran out of memory). */
static const char *const FINISH[] = {[COLIBRI_FINISH_LENGTH] = "length", [COLIBRI_FINISH_STOP] = "stop",
                                     [COLIBRI_FINISH_EOS] = "stop", [COLIBRI_FINISH_CONTEXT_FULL] = "context"};

/* Answer POST /generate with the body p[0..end) (a NUL at end); returns the status. */
static int generate(const colibri_model *model, uint32_t n_ctx, char *p, const char *end) {
    request r = {.prompt = NULL};
    colibri_generate_result res;
    colibri_session_params sp;
    colibri_session *session = NULL;
    colibri_status st;
    const char *err, *param = NULL, *finish = NULL;
    char *body = NULL, *ids = NULL;
    size_t body_len = 0, ids_len = 0, n_prompt = 0;
    FILE *out[2] = {NULL, NULL};
    int status = 500;

    colibri_generate_params_init(&r.gp); /* the library's defaults are docs/api.md's, but for max_tokens */
    r.gp.max_tokens = 64;
    if ((err = scan_object(p, end, &r, &param)) != NULL) return fail(400, param, err);
    if (r.prompt == NULL) return fail(400, "prompt", "prompt must be a non-empty string");
    colibri_session_params_init(&sp);
    sp.n_ctx = n_ctx;
    colibri_generate_result_init(&res);
    /* Each step runs when the ones before it succeeded; st keeps the library's last status. */
    if ((st = colibri_tokenize(model, r.prompt, r.len, 1, prompt_ids, MAX_BODY + 64, &n_prompt)) == 0 &&
        (st = colibri_session_new(model, &sp, &session)) == 0 &&
        (out[0] = open_memstream(&body, &body_len)) != NULL && (out[1] = open_memstream(&ids, &ids_len)) != NULL &&
        fputs("{\"text\": \"", out[0]) != EOF &&
        (st = colibri_generate(session, prompt_ids, n_prompt, &r.gp, on_token, out, NULL, 0, &res)) == 0 &&
        (size_t)res.finish_reason < sizeof FINISH / sizeof *FINISH && (finish = FINISH[res.finish_reason]) != NULL &&
        fflush(out[1]) == 0 && fprintf(out[0], "\", \"tokens\": [%s], \"prompt_tokens\": %lu, \"completion_tokens\": "
                                       "%lu, \"finish_reason\": \"%s\"}", ids, (unsigned long)n_prompt,
                                       (unsigned long)res.n_tokens, finish) > 0 && fflush(out[0]) == 0)
        status = respond(200, body);
    else /* CONTEXT_FULL: the prompt is too long; INVALID_ARGUMENT: a prompt or stop that is not UTF-8 */
        status = fail(st == COLIBRI_STATUS_CONTEXT_FULL || st == COLIBRI_STATUS_INVALID_ARGUMENT ? 400 : 500,
                      st == COLIBRI_STATUS_CONTEXT_FULL || n_prompt == 0 ? "prompt" : NULL,
                      st != COLIBRI_STATUS_OK ? colibri_last_error_message() : "out of memory");
    if (out[0]) fclose(out[0]);
    if (out[1]) fclose(out[1]);
    free(body);
    free(ids);
    colibri_session_free(session);
    return status;
}

/* Read one request and answer it; returns the status sent, 0 when none. */
static int handle(const colibri_model *model, uint32_t n_ctx) {
    time_t deadline = time(NULL) + TIMEOUT_S;
    size_t len = 0, head = 0;
    unsigned long long want;
    char *line, *length = NULL, *ctype = NULL, minor, after;
    int origin = 0;
    ssize_t r;

    while (head == 0) { /* the head: through its empty line (CRLF or bare LF line ends) */
        if (len == MAX_HEAD) return fail(431, NULL, "the request head is larger than 8 KiB");
        if ((r = recv(client, req + len, MAX_HEAD - len, 0)) <= 0 || time(NULL) > deadline) return 0; /* no answer */
        if (memchr(req + len, '\0', (size_t)r) != NULL) return fail(400, NULL, "a NUL byte in the request");
        req[len += (size_t)r] = '\0';
        if ((line = strstr(req, "\n\r\n")) != NULL || (line = strstr(req, "\n\n")) != NULL)
            head = (size_t)(line - req) + (line[1] == '\r' ? 3 : 2);
    }
    req[head - 1] = '\0'; /* the head is now a string of lines; the body starts at req + head */
    if (sscanf(req, "%15[A-Z] %255[^ \r\n] HTTP/1.%c%c", method, path, &minor, &after) != 4 ||
        (minor != '0' && minor != '1') || (after != '\r' && after != '\n'))
        return method[0] = path[0] = '\0', fail(400, NULL, "malformed request line");
    for (line = strchr(req, '\n'); line != NULL; line = strchr(line + 1, '\n')) { /* other headers are ignored */
        if (strncasecmp(line + 1, "Content-Length:", 15) == 0) /* a repeated one is refused below */
            length = length ? "" : line + 16 + strspn(line + 16, " \t");
        if (strncasecmp(line + 1, "Content-Type:", 13) == 0) ctype = line + 14 + strspn(line + 14, " \t");
        if (strncasecmp(line + 1, "Origin:", 7) == 0) origin = 1;
    }
    path[strcspn(path, "?")] = '\0'; /* the query string is ignored */
    if (strcmp(path, "/generate") != 0) return fail(404, NULL, "not found: this server has only POST /generate");
    if (strcmp(method, "POST") != 0) return fail(405, NULL, "method not allowed: use POST");
    if (origin) return fail(403, NULL, "cross-origin requests are refused");
    errno = 0;
    if (length == NULL || *length < '0' || *length > '9' ||
        (want = strtoull(length, &line, 10), line[strspn(line, " \t\r")] != '\n'))
        return fail(400, NULL, "a body with a numeric Content-Length is required (chunked bodies are not supported)");
    if (errno == ERANGE || want > MAX_BODY) return fail(413, NULL, "the body is larger than 64 KiB");
    if (ctype == NULL || strncasecmp(ctype, "application/json", 16) != 0 || (ctype[16] != ';' && ctype[16] != '\r' &&
                                                                            ctype[16] != '\n' && ctype[16] != ' '))
        return fail(415, NULL, "send the body with Content-Type: application/json");
    for (len -= head; len < want; len += (size_t)r) /* the body; bytes after it are ignored */
        if ((r = recv(client, req + head + len, (size_t)want - len, 0)) <= 0 || time(NULL) > deadline) return 0;
    req[head + want] = '\0';
    return generate(model, n_ctx, req + head, req + head + want);
}

int main(int argc, char **argv) {
    struct timeval timeout = {TIMEOUT_S, 0}, drain = {1, 0};
    unsigned long port = 0, max_requests = 0, n_ctx = 0, served;
    colibri_model *model = NULL;
    int lfd, one = 1, status;
    char junk;

    if (argc < 3 || argc > 5 || sscanf(argv[2], "%lu%c", &port, &junk) != 1 || port > 65535 ||
        (argc > 3 && sscanf(argv[3], "%lu%c", &max_requests, &junk) != 1) ||
        (argc > 4 && (sscanf(argv[4], "%lu%c", &n_ctx, &junk) != 1 || n_ctx > 1 << 20))) {
        fprintf(stderr, "usage: %s MODEL.colibri PORT [MAX_REQUESTS [N_CTX]]   (PORT 0: any free port)\n", argv[0]);
        return 2;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t addr_len = sizeof addr;
    signal(SIGPIPE, SIG_IGN); /* a client that leaves early must not end the server */
    if (colibri_model_open(argv[1], NULL, &model) != COLIBRI_STATUS_OK) {
        fprintf(stderr, "http_server: cannot open %s: %s\n", argv[1], colibri_last_error_message());
        return 1;
    }
    if ((lfd = socket(AF_INET, SOCK_STREAM, 0)) < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(lfd, (struct sockaddr *)&addr, sizeof addr) || listen(lfd, 16) ||
        getsockname(lfd, (struct sockaddr *)&addr, &addr_len)) {
        perror("http_server: socket/bind/listen");
        colibri_model_free(model);
        return 1;
    }
    printf("listening on %u\n", (unsigned)ntohs(addr.sin_port));
    fflush(stdout);
    for (served = 0; max_requests == 0 || served < max_requests; served++) {
        while ((client = accept(lfd, NULL, NULL)) < 0) continue; /* a client that left already: the next one */
        method[0] = path[0] = '\0';
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
        setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
        status = handle(model, (uint32_t)n_ctx);
        /* Stop sending, then drain the client (2 s at most): unread bytes would make close() reset the connection. */
        shutdown(client, SHUT_WR);
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &drain, sizeof drain);
        for (time_t t0 = time(NULL); time(NULL) < t0 + 2 && recv(client, req, sizeof req, 0) > 0;) continue;
        close(client);
        fprintf(stderr, "http_server: %s %s -> %d\n", method[0] ? method : "-", path[0] ? path : "-", status);
    }
    close(lfd);
    colibri_model_free(model);
    return 0;
}
