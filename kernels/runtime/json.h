/* Just enough JSON to read a runner request: objects, strings, numbers, true/false/null,
 * arrays (skipped). Values are looked up by dotted path ("policy.min_runs"). */
#ifndef FK_JSON_H
#define FK_JSON_H

#include <stddef.h>

#define FK_JSON_MAX 128

typedef struct {
    int n;
    char key[FK_JSON_MAX][96];   /* dotted path */
    char val[FK_JSON_MAX][1024]; /* raw scalar text; strings unescaped */
    int is_str[FK_JSON_MAX];
} fk_json;

/* Parses text; returns 0, or -1 with a message naming the byte offset. */
int fk_json_parse(const char *text, fk_json *out, char *err, size_t errlen);
const char *fk_json_str(const fk_json *j, const char *path);          /* NULL if absent */
double fk_json_num(const fk_json *j, const char *path, double fallback); /* true=1, false=0 */
/* Writes s as a JSON string literal (with quotes) into buf. */
void fk_json_quote(const char *s, char *buf, size_t len);

#endif
