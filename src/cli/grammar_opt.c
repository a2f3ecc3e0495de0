/* The structured-output options of the commands (--json-schema FILE,
 * --json-object): one place that turns them into a grammar, so gem run and
 * gem bench constrain their output the way gem serve's response_format
 * does (the same compiler, grammar/grammar.h). */
#include <stdlib.h>

#include "cli/cli.h"
#include "util/file.h"
#include "util/json.h"

gram *cli_grammar(const char *path, gem_err *err) {
    if (!path) return gram_json_schema(NULL, GRAM_SYNTAX_JSON, err);
    size_t n = 0;
    char *text = file_read(path, 0, &n, err);
    if (!text) return NULL;
    json *schema = json_parse(text, n, err);
    free(text);
    if (!schema) {
        gem_err_wrap(err, "%s", path);
        return NULL;
    }
    gram *g = gram_json_schema(schema, GRAM_SYNTAX_JSON, err);
    json_free(schema);
    if (!g) gem_err_wrap(err, "%s", path);
    return g;
}
