# Tables 1-4 and Figures 2-5 under reports/ (markdown + CSV, PNG + SVG), the paper's values beside
# the reproduced ones.  Reads only results/ and reports/measured/; `snakemake --report
# reports/report.html` bundles these outputs with the captions in workflow/report/.
