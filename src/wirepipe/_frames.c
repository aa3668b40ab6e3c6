/* wirepipe._frames: a NATS read in C loops: one subscription's messages cut out of it, their header blocks and
 * JetStream reply subjects parsed.
 *
 * The raw subscription (connectors/nats/reader.py) reads a core NATS or JetStream pull inbox by cutting each
 * message of its subscription out of nats-py's parser buffer; a batch's header blocks become dicts
 * (connectors/nats/headers.py) and a JetStream batch's reply subjects its stream sequences and delivery counts
 * (connectors/nats/jetstream_reader.py). For small records each of these was ~0.4-1.1 us a message in Python,
 * together about half of a JetStream consumer's CPU; here each is one pass. Each Python module keeps its
 * loop for an install without a compiler, with the same results (tests/test_frame_cutting.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* A decimal of digits only (no sign, space or underscore: not what nats-server writes); -1 otherwise. */
static Py_ssize_t
parse_size(const char *s, Py_ssize_t n)
{
    if (n <= 0 || n > 18) {
        return -1;
    }
    Py_ssize_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return -1;
        }
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* The tokens of [s, end) at each sep (empty ones too, as bytes.split(sep) gives them) into tok/len; how many, or
 * -1 when there are more than max. */
static int
split_at(const char *s, const char *end, char sep, const char **tok, Py_ssize_t *len, int max)
{
    int n = 0;
    while (1) {
        const char *at = memchr(s, sep, (size_t)(end - s));
        const char *stop = at != NULL ? at : end;
        if (n == max) {
            return -1;
        }
        tok[n] = s;
        len[n] = stop - s;
        n++;
        if (at == NULL) {
            return n;
        }
        s = at + 1;
    }
}

/* cut_frames(buf, sid: bytes) -> (frames: list, consumed: int, payload_bytes: int, partial: bool)
 *
 * From the start of buf (bytes or bytearray), each message of subscription sid wholly in it, as
 * (reply, payload, header block or None, subject) bytes; it stops at the first thing that is not one (another
 * subscription's message, PING, INFO, -ERR, a control line of another form or not all read yet), which the
 * caller hands to nats-py's parser. A message of sid whose control line is read and whose payload is not
 * all there yet stops the loop with partial True (it is cut at the next read). Control lines are split at
 * single spaces as nats-server writes them: "HMSG subject sid [reply] header-size total-size",
 * "MSG subject sid [reply] size"; consumed is where the first message not cut starts. */
static PyObject *
cut_frames(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "cut_frames() takes the buffer and the subscription id");
        return NULL;
    }
    if (!PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "cut_frames(): the subscription id is bytes");
        return NULL;
    }
    const char *own = PyBytes_AS_STRING(args[1]);
    Py_ssize_t own_len = PyBytes_GET_SIZE(args[1]);
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const char *src = (const char *)view.buf;
    Py_ssize_t end = view.len, pos = 0, payload_bytes = 0;
    int partial = 0;
    PyObject *frames = PyList_New(0);
    PyObject *subject = NULL; /* the last subject: a run of messages on one subject shares one object */
    if (frames == NULL) {
        goto fail;
    }
    while (pos < end) {
        const char *line = src + pos;
        const char *nl = memchr(line, '\r', (size_t)(end - pos));
        while (nl != NULL && (nl + 1 >= src + end || nl[1] != '\n')) {
            nl = memchr(nl + 1, '\r', (size_t)(src + end - nl - 1));
        }
        if (nl == NULL) {
            break;
        }
        /* the tokens at single spaces: at most 6 */
        const char *tok[6];
        Py_ssize_t len[6];
        int n = split_at(line, nl, ' ', tok, len, 6);
        int hmsg = n >= 1 && len[0] == 4 && memcmp(tok[0], "HMSG", 4) == 0;
        int msg = n >= 1 && len[0] == 3 && memcmp(tok[0], "MSG", 3) == 0;
        int replied;
        Py_ssize_t header_size, total;
        if (hmsg && (n == 6 || n == 5)) {
            replied = n == 6;
            header_size = parse_size(tok[n - 2], len[n - 2]);
            total = parse_size(tok[n - 1], len[n - 1]);
        }
        else if (msg && (n == 5 || n == 4)) {
            replied = n == 5;
            header_size = 0;
            total = parse_size(tok[n - 1], len[n - 1]);
        }
        else {
            break;
        }
        if (header_size < 0 || total < 0 || header_size > total) {
            break;
        }
        int empty = 0;
        for (int i = 0; i < n; i++) {
            empty |= len[i] == 0;
        }
        if (empty || len[2] != own_len || memcmp(tok[2], own, (size_t)own_len) != 0) {
            break;
        }
        Py_ssize_t start = (nl - src) + 2;
        Py_ssize_t stop = start + total;
        if (stop + 2 > end) {
            partial = 1; /* the rest comes with the next read */
            break;
        }
        Py_ssize_t body = start + header_size;
        if (subject == NULL || PyBytes_GET_SIZE(subject) != len[1] || memcmp(PyBytes_AS_STRING(subject), tok[1], (size_t)len[1]) != 0) {
            Py_XDECREF(subject);
            subject = PyBytes_FromStringAndSize(tok[1], len[1]);
            if (subject == NULL) {
                goto fail;
            }
        }
        PyObject *reply = replied ? PyBytes_FromStringAndSize(tok[3], len[3]) : PyBytes_FromStringAndSize("", 0);
        PyObject *payload = PyBytes_FromStringAndSize(src + body, stop - body);
        PyObject *header;
        if (header_size) {
            header = PyBytes_FromStringAndSize(src + start, header_size);
        }
        else {
            header = Py_None;
            Py_INCREF(header);
        }
        if (reply == NULL || payload == NULL || header == NULL) {
            Py_XDECREF(reply);
            Py_XDECREF(payload);
            Py_XDECREF(header);
            goto fail;
        }
        Py_INCREF(subject);
        PyObject *frame = PyTuple_Pack(4, reply, payload, header, subject);
        Py_DECREF(reply);
        Py_DECREF(payload);
        Py_DECREF(header);
        Py_DECREF(subject);
        if (frame == NULL) {
            goto fail;
        }
        int failed = PyList_Append(frames, frame);
        Py_DECREF(frame);
        if (failed) {
            goto fail;
        }
        payload_bytes += stop - body;
        pos = stop + 2;
    }
    Py_XDECREF(subject);
    PyBuffer_Release(&view);
    return Py_BuildValue("(NnnO)", frames, pos, payload_bytes, partial ? Py_True : Py_False);

fail:
    Py_XDECREF(subject);
    Py_XDECREF(frames);
    PyBuffer_Release(&view);
    return NULL;
}

/* Python's str.strip() for ASCII: space, \t \n \v \f \r and \x1c-\x1f */
static int
is_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

static void
strip(const char **s, Py_ssize_t *n)
{
    while (*n > 0 && is_space((unsigned char)(*s)[0])) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && is_space((unsigned char)(*s)[*n - 1])) {
        (*n)--;
    }
}

/* A line of the block before: its bytes and the key and value it gave (a repeated line reuses both). */
typedef struct {
    const char *line;
    Py_ssize_t len;
    PyObject *key;
    PyObject *value;
} Seen;

#define MAX_SEEN 32

/* One block of ASCII bytes as parse_headers reads it (a status line, "key: value" lines, both stripped). */
static PyObject *
parse_block(const char *s, Py_ssize_t n, Seen *seen, int *n_seen)
{
    PyObject *out = PyDict_New();
    if (out == NULL) {
        return NULL;
    }
    const char *end = s + n;
    const char *line = s;
    int index = 0;
    int first = 1;
    while (line <= end) {
        const char *eol = line;
        while (eol + 1 < end && !(eol[0] == '\r' && eol[1] == '\n')) {
            eol++;
        }
        if (eol + 1 >= end) {
            eol = end; /* the last line, without CRLF */
        }
        Py_ssize_t len = eol - line;
        if (first) {
            first = 0;
            const char *st = line + 8;
            Py_ssize_t sl = len - 8;
            if (sl > 0) {
                strip(&st, &sl);
                if (sl > 0) {
                    const char *sp = memchr(st, ' ', (size_t)sl);
                    Py_ssize_t cl = sp != NULL ? sp - st : sl;
                    PyObject *code = PyUnicode_FromStringAndSize(st, cl);
                    if (code == NULL || PyDict_SetItemString(out, "Status", code) < 0) {
                        Py_XDECREF(code);
                        goto fail;
                    }
                    Py_DECREF(code);
                    if (sp != NULL && sl - cl - 1 > 0) {
                        PyObject *desc = PyUnicode_FromStringAndSize(sp + 1, sl - cl - 1);
                        if (desc == NULL || PyDict_SetItemString(out, "Description", desc) < 0) {
                            Py_XDECREF(desc);
                            goto fail;
                        }
                        Py_DECREF(desc);
                    }
                }
            }
        }
        else if (len > 0) {
            PyObject *key, *value;
            if (index < *n_seen && seen[index].len == len && memcmp(seen[index].line, line, (size_t)len) == 0) {
                key = seen[index].key;
                value = seen[index].value;
            }
            else {
                const char *colon = memchr(line, ':', (size_t)len);
                const char *k = line, *v = colon != NULL ? colon + 1 : eol;
                Py_ssize_t kl = colon != NULL ? colon - line : len, vl = eol - v;
                strip(&k, &kl);
                strip(&v, &vl);
                key = PyUnicode_FromStringAndSize(k, kl);
                value = PyUnicode_FromStringAndSize(v, vl);
                if (key == NULL || value == NULL) {
                    Py_XDECREF(key);
                    Py_XDECREF(value);
                    goto fail;
                }
                if (index < MAX_SEEN) {
                    if (index < *n_seen) {
                        Py_DECREF(seen[index].key);
                        Py_DECREF(seen[index].value);
                    }
                    else {
                        *n_seen = index + 1;
                    }
                    seen[index].line = line;
                    seen[index].len = len;
                    seen[index].key = key;
                    seen[index].value = value;
                }
                else {
                    int failed = PyDict_SetItem(out, key, value);
                    Py_DECREF(key);
                    Py_DECREF(value);
                    if (failed) {
                        goto fail;
                    }
                    index++;
                    line = eol + 2;
                    continue;
                }
            }
            if (PyDict_SetItem(out, key, value) < 0) {
                goto fail;
            }
            index++;
        }
        line = eol + 2;
    }
    return out;

fail:
    Py_DECREF(out);
    return NULL;
}

/* parse_header_blocks(raws: list, fallback) -> list
 *
 * wirepipe.connectors.nats.headers.parse_headers of each item of raws (bytes or None): None for None or
 * empty bytes, fallback(raw) for a block with a byte that is not ASCII (decoded as UTF-8 there), else the
 * block's dict. A line equal to the line at the same place in the blocks before gives the same key and value
 * objects (a batch's blocks mostly repeat all but their last line). */
static PyObject *
parse_header_blocks(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "parse_header_blocks() takes a list of blocks and the fallback parser");
        return NULL;
    }
    PyObject *raws = args[0], *fallback = args[1];
    Py_ssize_t n = PyList_GET_SIZE(raws);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        return NULL;
    }
    Seen seen[MAX_SEEN];
    int n_seen = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *raw = PyList_GET_ITEM(raws, i);
        PyObject *h;
        if (raw == Py_None || (PyBytes_Check(raw) && PyBytes_GET_SIZE(raw) == 0)) {
            h = Py_None;
            Py_INCREF(h);
        }
        else if (!PyBytes_Check(raw)) {
            h = PyObject_CallOneArg(fallback, raw);
        }
        else {
            const char *s = PyBytes_AS_STRING(raw);
            Py_ssize_t len = PyBytes_GET_SIZE(raw);
            int ascii = 1;
            for (Py_ssize_t j = 0; j < len; j++) {
                if ((unsigned char)s[j] >= 0x80) {
                    ascii = 0;
                    break;
                }
            }
            h = ascii ? parse_block(s, len, seen, &n_seen) : PyObject_CallOneArg(fallback, raw);
        }
        if (h == NULL) {
            Py_DECREF(out);
            out = NULL;
            break;
        }
        PyList_SET_ITEM(out, i, h);
    }
    for (int j = 0; j < n_seen; j++) {
        Py_DECREF(seen[j].key);
        Py_DECREF(seen[j].value);
    }
    return out;
}

/* ack_reply_columns(replies: list[str]) -> (stream sequences, delivery counts, pending of the last) or None
 *
 * wirepipe.connectors.nats.jetstream_reader.parse_ack_reply of each $JS.ACK reply subject, as columns: 9 tokens
 * (v1) or 11 and more (v2: a domain and an account hash first); None when one is of another form or a token
 * read is not digits only (the caller reads them in Python then). */
static PyObject *
ack_reply_columns(PyObject *module, PyObject *replies)
{
    if (!PyList_Check(replies)) {
        PyErr_SetString(PyExc_TypeError, "ack_reply_columns() takes a list of reply subjects");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(replies);
    PyObject *seqs = PyList_New(n), *delivered = PyList_New(n);
    Py_ssize_t pending = 0;
    if (seqs == NULL || delivered == NULL) {
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(replies, i);
        if (!PyUnicode_Check(r) || !PyUnicode_IS_ASCII(r)) {
            goto other;
        }
        const char *s = (const char *)PyUnicode_DATA(r);
        Py_ssize_t len = PyUnicode_GET_LENGTH(r);
        const char *tok[16];
        Py_ssize_t tl[16];
        int nt = split_at(s, s + len, '.', tok, tl, 16);
        int off;
        if (nt == 9) {
            off = 0;
        }
        else if (nt >= 11) {
            off = 2;
        }
        else {
            goto other;
        }
        Py_ssize_t seq = parse_size(tok[5 + off], tl[5 + off]);
        Py_ssize_t count = parse_size(tok[4 + off], tl[4 + off]);
        Py_ssize_t left = parse_size(tok[8 + off], tl[8 + off]);
        if (seq < 0 || count < 0 || left < 0) {
            goto other;
        }
        PyObject *a = PyLong_FromSsize_t(seq), *b = PyLong_FromSsize_t(count);
        if (a == NULL || b == NULL) {
            Py_XDECREF(a);
            Py_XDECREF(b);
            goto fail;
        }
        PyList_SET_ITEM(seqs, i, a);
        PyList_SET_ITEM(delivered, i, b);
        pending = left;
    }
    return Py_BuildValue("(NNn)", seqs, delivered, pending);

other:
    Py_DECREF(seqs);
    Py_DECREF(delivered);
    Py_RETURN_NONE;

fail:
    Py_XDECREF(seqs);
    Py_XDECREF(delivered);
    return NULL;
}

static PyMethodDef methods[] = {
    {"cut_frames", (PyCFunction)(void (*)(void))cut_frames, METH_FASTCALL,
     "cut_frames(buf, sid: bytes) -> (frames: list, consumed: int, payload_bytes: int, partial: bool)\n--\n\n"
     "The messages of subscription sid at the start of a NATS read, as (reply, payload, header block or None, "
     "subject) tuples; see wirepipe.connectors.nats.reader._frames_parser."},
    {"parse_header_blocks", (PyCFunction)(void (*)(void))parse_header_blocks, METH_FASTCALL,
     "parse_header_blocks(raws: list, fallback) -> list\n--\n\n"
     "parse_headers of each NATS header block (bytes or None); fallback(raw) for a block that is not ASCII; see "
     "wirepipe.connectors.nats.headers.parse_header_column."},
    {"ack_reply_columns", ack_reply_columns, METH_O,
     "ack_reply_columns(replies: list[str]) -> tuple[list[int], list[int], int] | None\n--\n\n"
     "The stream sequences and delivery counts of $JS.ACK reply subjects and the pending count of the last; None "
     "for a form it does not read; see wirepipe.connectors.nats.jetstream_reader.parse_ack_replies."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "wirepipe._frames",
    "One subscription's messages cut out of a NATS read in one C loop (see wirepipe.connectors.nats.reader).", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__frames(void)
{
    return PyModule_Create(&module);
}
