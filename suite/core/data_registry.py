"""The registry of external data files: each file's name, SHA-256, size, source URL, licence and citation.

Every URL is pinned to a commit of the public repository that distributes the file, and its bytes were checked to
be the same as ours (same SHA-256), so a download needs no conversion. See docs/data.md.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The TRJ paper's code (Davies et al. 2023), at the commit whose files were checked.
TRJP = "https://raw.githubusercontent.com/daviesl/trjp/e2d745712104d429e8e4942410627992ad6dd507"
#: The Causal Discovery Toolbox (cdt 0.6.0), at the commit whose files were checked.
CDT = (
    "https://raw.githubusercontent.com/FenTechSolutions/CausalDiscoveryToolbox/d0bc352534dcbfac19a84a1bb05f33fe311378d2"
)

TRJ_PAPER = (
    "Davies, L., Salomone, R., Sutton, M. and Drovandi, C. (2023). Transport Reversible Jump Proposals. "
    "AISTATS 2023, PMLR 206"
)
SACHS_PAPER = (
    "Sachs, K., Perez, O., Pe'er, D., Lauffenburger, D. A. and Nolan, G. P. (2005). Causal Protein-Signaling "
    "Networks Derived from Multiparameter Single-Cell Data. Science 308(5721):523-529"
)
CDT_PAPER = (
    "Kalainathan, D., Goudet, O. and Dutta, R. (2020). Causal Discovery Toolbox: Uncovering causal relationships "
    "in Python. JMLR 21(37):1-5"
)
TRJP_LICENCE = "MIT (LICENSE.md of daviesl/trjp, (c) 2020 Laurence Davies, Robert Salomone)"
CDT_LICENCE = (
    "MIT (LICENSE.md of the cdt package, (c) 2018 Diviyan Kalainathan); the measurements are Sachs et al. (2005)'s"
)


@dataclass(frozen=True)
class DataFile:
    """A data file a problem needs: name, SHA-256, size in bytes, provenance, source URL, licence and citation."""

    name: str
    sha256: str
    origin: str
    size: int = 0
    url: str = ""
    licence: str = ""
    citation: str = ""


#: Every external file the problems use.
KNOWN_FILES: dict[str, DataFile] = {
    f.name: f
    for f in (
        DataFile(
            "block_vs.csv",
            "0023993e3f8d17ce5cde2f61dd58af745df07601c7b1a14a0d06179d08a08e62",
            "simulated robust block variable-selection data distributed with the TRJ paper's code (80 rows)",
            size=9272,
            url=f"{TRJP}/examples/vs/six_dim_rr.csv",
            licence=TRJP_LICENCE,
            citation=TRJ_PAPER,
        ),
        DataFile(
            "fa_exchange_rates.npy",
            "d38d8c4bdb68fcfe20380633342b6d39ce28438aa735b1793f145e240b771564",
            "monthly exchange rates of six currencies against GBP, 1975-1986 (West & Harrison 1997), "
            "standardised, 143 x 6, as distributed with the TRJ paper's code",
            size=6992,
            url=f"{TRJP}/examples/fa/FA_data.npy",
            licence=TRJP_LICENCE,
            citation=f"West, M. and Harrison, J. (1997). Bayesian Forecasting and Dynamic Models, 2nd ed. Springer; "
            f"Lopes, H. F. and West, M. (2004). Bayesian model assessment in factor analysis. Statistica Sinica "
            f"14(1):41-67; as distributed with {TRJ_PAPER}",
        ),
        DataFile(
            "sachs_cyto_full_data.csv",
            "fc331dcd0bc1d8765986b88cd1d23dd5a3f52e4ffc299fdf96de9d522ddf01aa",
            "Sachs et al. (2005) flow cytometry data, 7466 x 11, as shipped with the cdt package",
            size=427677,
            url=f"{CDT}/cdt/data/resources/cyto_full_data.csv",
            licence=CDT_LICENCE,
            citation=f"{SACHS_PAPER}; as shipped with {CDT_PAPER}",
        ),
        DataFile(
            "sachs_target_edges.csv",
            "398bc137b2669432ef12e0c57d3783fa876c1c7e2377577d3e75410f085485f6",
            "the 18 consensus edges of the Sachs network, as shipped with the cdt package",
            size=267,
            url=f"{CDT}/cdt/data/resources/cyto_full_target.csv",
            licence=CDT_LICENCE,
            citation=f"{SACHS_PAPER}; as shipped with {CDT_PAPER}",
        ),
    )
}
