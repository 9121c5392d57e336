/* Prints the library version and checks that the header and the library agree. */
#include <colibri.h>
#include <stdio.h>
#include <string.h>

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
    return 0;
}
