/* Prints the library version and checks that the header and the library agree, and that a
 * params struct from an older header is filled without a byte written past it. */
#include <colibri.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* colibri_model_params as ABI 1's first header declared it (12 bytes), with bytes after it that
 * the program owns: the library's struct has grown since, the sized init must not touch them. */
struct old_model_params {
    uint32_t struct_size;
    int32_t use_mmap;
    int32_t use_mlock;
};

static int sized_init_keeps_to_the_callers_struct(void) {
    struct {
        struct old_model_params p;
        unsigned char after[32];
    } old;
    colibri_model_params now;
    size_t i;
    memset(&old, 0xa5, sizeof old);
    if (colibri_model_params_init_sized((colibri_model_params *)&old.p, sizeof old.p) != COLIBRI_STATUS_OK ||
        old.p.struct_size != sizeof old.p || old.p.use_mmap != 1 || old.p.use_mlock != 0) {
        fprintf(stderr, "the 12-byte params were not filled: %s\n", colibri_last_error_message());
        return 1;
    }
    for (i = 0; i < sizeof old.after; i++) {
        if (old.after[i] != 0xa5) {
            fprintf(stderr, "the library wrote byte %u past a 12-byte colibri_model_params\n", (unsigned)i);
            return 1;
        }
    }
    /* The header's colibri_model_params_init is the sized init with this header's sizeof. */
    colibri_model_params_init(&now);
    if (now.struct_size != sizeof now) {
        fprintf(stderr, "colibri_model_params_init set struct_size %u, sizeof is %u\n", (unsigned)now.struct_size,
                (unsigned)sizeof now);
        return 1;
    }
    return 0;
}

int main(void) {
    char expected[32];
    snprintf(expected, sizeof expected, "%d.%d.%d", COLIBRI_VERSION_MAJOR, COLIBRI_VERSION_MINOR,
             COLIBRI_VERSION_PATCH);
    const char *v = colibri_version();
    printf("colibri %s (ABI %u)\n", v, (unsigned)colibri_abi_version());
    if (strcmp(v, expected) != 0 || colibri_abi_version() != COLIBRI_ABI_VERSION) {
        fprintf(stderr, "header says %s / ABI %d, library says %s / ABI %u\n", expected, COLIBRI_ABI_VERSION, v,
                (unsigned)colibri_abi_version());
        return 1;
    }
    return sized_init_keeps_to_the_callers_struct();
}
