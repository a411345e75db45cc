/* cmd_graph.c: `tessel graph MODEL`: a model as text IR. */
#include <stdlib.h>
#include <string.h>

#include "../models/models.h"
#include "cli.h"

int cmd_graph(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = cli_parse(c, argc, argv, 1, 1, &p);
    if (rc || p.help) return rc ? rc : (cli_help(c, stdout), 0);
    diag d = {0};
    graph *g = cli_load_model(c, &p, p.pos[0], &d);
    if (!g) return cli_report(&d);
    char *text = graph_print(g);
    fputs(text, stdout);
    free(text);
    graph_free(g);
    return 0;
}
