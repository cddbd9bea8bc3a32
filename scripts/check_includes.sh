#!/usr/bin/env bash
# The components' include direction: each may include only itself and the components below it,
#   core < layouts < executor < inspector < scheduler < runtime,   core < layouts < io < runtime,
# and the runtime's public headers never include its internals (runtime/detail is not installed).
# Prints every include that breaks the order and exits 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A allowed=(
  [core]="core"
  [layouts]="core layouts"
  [executor]="core layouts executor"
  [inspector]="core layouts executor inspector"
  [scheduler]="core layouts executor inspector scheduler"
  [io]="core layouts io"
  [runtime]="core layouts executor inspector scheduler io runtime"
)

bad=0
for component in "${!allowed[@]}"; do
  while IFS= read -r file; do
    while IFS=: read -r line target; do
      top=${target%%/*}
      [[ -n ${allowed[$top]+x} ]] || continue  # not a component (a system or test header)
      ok=0
      for a in ${allowed[$component]}; do [[ $top == "$a" ]] && ok=1; done
      # A public runtime header stays installable: it includes none of runtime/detail.
      if [[ $ok == 1 && $component == runtime && $file != runtime/detail/* && $file == *.h* && $target == runtime/detail/* ]]; then
        ok=0
      fi
      if [[ $ok == 0 ]]; then
        echo "$file:$line: includes $target (${component} may include: ${allowed[$component]})"
        bad=1
      fi
    done < <(grep -n '^#include "' "$file" | sed -E 's/^([0-9]+):#include "([^"]+)".*/\1:\2/')
  done < <(find "$component" -type f \( -name '*.hpp' -o -name '*.cuh' -o -name '*.cpp' -o -name '*.cu' \) | sort)
done
if [[ $bad == 0 ]]; then echo "include direction: ok"; fi
exit $bad
