#!/usr/bin/env bash
# run: tier=check san=no
# The figures the docs quote from the tools (parameters, kernels per step,
# arena sizes, the cost model's step times, the golden cases, the article
# runs' accuracies and losses from their logs) are what the tools say now:
# scripts/doc_figures.py --check over every Markdown file that marks figures. Also: the README's `.net` example compiles, and the
# README stays a front door (at most 200 lines). Prints `N passed, N failed`.
. tests/lib.sh

docs=$(grep -l '<!--fig' README.md docs/*.md docs/*/*.md)
check "some docs mark figures ($(echo $docs))" [ -n "$docs" ]
out=$("$py" scripts/doc_figures.py --check --bin "$bin" $docs 2>&1)
check "every marked figure is the tools' own: $out" [ $? = 0 ]
check "it counted the figures ($out)" bash -c "echo '$out' | grep -Eq '^doc_figures: ([2-9][0-9]|[0-9]{3,}) figures'"

# It can fail: one figure changed in a copy is named.
sed '0,/<!--fig params:resnet18-->[0-9,]*</s//<!--fig params:resnet18-->1</' docs/guide.md >"$tmp/guide.md"
"$py" scripts/doc_figures.py --check --bin "$bin" "$tmp/guide.md" >"$tmp/out" 2>&1
check "a stale figure fails the check (exit $?)" grep -q "params:resnet18 is '1' in the file, '11,181,642' from the tools" "$tmp/out"
"$py" scripts/doc_figures.py --bin "$bin" "$tmp/guide.md" >/dev/null 2>&1
check "without --check it is rewritten" cmp -s "$tmp/guide.md" docs/guide.md
sed 's|<!--fig article:10-epoch/run1:test-->[0-9.]*<|<!--fig article:10-epoch/run1:test-->0.9999<|' \
    docs/article/README.md >"$tmp/article.md"
"$py" scripts/doc_figures.py --check --bin "$bin" "$tmp/article.md" >"$tmp/out" 2>&1
check "a run's accuracy, changed, fails the check" grep -q "article:10-epoch/run1:test is '0.9999' in the file, '0.6918' from the tools" "$tmp/out"
check "docs/article/README.md quotes run 1's 10-epoch accuracy from its log" \
    grep -q '<!--fig article:10-epoch/run1:test-->0.6918<' docs/article/README.md

awk '/^```net$/ { f = 1; next } /^```$/ { f = 0 } f' README.md >"$tmp/readme.net"
check "the README has a .net example" [ -s "$tmp/readme.net" ]
check "the README's .net example compiles" "$bin/dpc" "$tmp/readme.net" -o "$tmp/readme.plan"
check "the README is at most 200 lines ($(wc -l <README.md))" [ "$(wc -l <README.md)" -le 200 ]
finish
