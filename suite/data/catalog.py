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

#: Rdatasets (R packages' data as CSV), at the commit whose files were checked.
RDATASETS = "https://raw.githubusercontent.com/vincentarelbundock/Rdatasets/1dcc2bf5f955cc1224a3e1307256e1fe86b68dae"
#: The mixAK package's CRAN mirror on GitHub, at the commit whose files were checked (Richardson & Green's values).
MIXAK = "https://raw.githubusercontent.com/cran/mixAK/fed9894dacddcb5968c4fd7a913abc602dedf660"
#: The harmonic package (astro-informatics), at the commit whose radiata pine file was checked.
HARMONIC = "https://raw.githubusercontent.com/astro-informatics/harmonic/dbb9feab66a71224a67b001314b926247abb2af3"
RDATASETS_LICENCE = "GPL-3 (the DESCRIPTION of Rdatasets); the data are those of the R packages named"
MIXAK_LICENCE = "GPL (>= 3) (the mixAK package's licence)"
HARMONIC_LICENCE = "GPL-3 (LICENSE of astro-informatics/harmonic)"
RG_PAPER = (
    "Richardson, S. and Green, P. J. (1997). On Bayesian analysis of mixtures with an unknown number of components "
    "(with discussion). JRSS B 59(4):731-792"
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
        DataFile(
            "coal.csv",
            "8c8c9f98dca57efc85c8a2e6d73a19f414fcc5e6ece32b1135e95dd176e422f8",
            "British coal-mining disasters 1851-1962, 191 dates in decimal years (R package boot, data coal)",
            size=4258,
            url=f"{RDATASETS}/csv/boot/coal.csv",
            licence=RDATASETS_LICENCE,
            citation="Jarrett, R. G. (1979). A note on the intervals between coal-mining disasters. Biometrika "
            "66(1):191-193; as corrected by Raftery, A. E. and Akman, V. E. (1986), Biometrika 73(1):85-89",
        ),
        DataFile(
            "galaxies.csv",
            "5c094d8beb8ecc980493de62e9fd4d2cf7f891b07aed6b1c55a5b42879f498d0",
            "velocities (km/s) of 82 galaxies in the Corona Borealis region (R package MASS, data galaxies)",
            size=737,
            url=f"{RDATASETS}/csv/MASS/galaxies.csv",
            licence=RDATASETS_LICENCE,
            citation="Roeder, K. (1990). Density estimation with confidence sets exemplified by superclusters and "
            "voids in the galaxies. JASA 85(411):617-624",
        ),
        DataFile(
            "Galaxy.R",
            "9f423c83fa22f42ef7048dd335be9cd778691bd9af2306a99f33182a19b48836",
            "the 82 galaxy velocities (1000 km/s) as Richardson & Green (1997) used them (R package mixAK)",
            size=763,
            url=f"{MIXAK}/data/Galaxy.R",
            licence=MIXAK_LICENCE,
            citation=f"Roeder (1990), JASA 85(411):617-624; {RG_PAPER}",
        ),
        DataFile(
            "Enzyme.R",
            "946e46c8d7e8310d98d6988b3175e271998a58110712ea09f04030eea9fd93eb",
            "enzymatic activity in the blood of 245 individuals (R package mixAK)",
            size=1798,
            url=f"{MIXAK}/data/Enzyme.R",
            licence=MIXAK_LICENCE,
            citation=f"Bechtel, Y. C. et al. (1993), Clinical Pharmacology and Therapeutics 54(4):386-392; {RG_PAPER}",
        ),
        DataFile(
            "Acidity.R",
            "dcc3cb3a1b613cda3604b93a7fb80f4213304f85d81856e171bfe69d7382c18f",
            "log acid neutralising capacity of 155 lakes in north-central Wisconsin (R package mixAK)",
            size=1587,
            url=f"{MIXAK}/data/Acidity.R",
            licence=MIXAK_LICENCE,
            citation=f"Crawford, S. L. et al. (1992), JASA 87(418):374-386; {RG_PAPER}",
        ),
        DataFile(
            "lynx.csv",
            "0766d4043eb8a20ac83afefff1c78063beff3891571c59e8e38d72503ca86cf1",
            "annual Canadian lynx trappings 1821-1934 (R datasets, lynx)",
            size=1438,
            url=f"{RDATASETS}/csv/datasets/lynx.csv",
            licence=RDATASETS_LICENCE,
            citation="Campbell, M. J. and Walker, A. M. (1977). A survey of statistical work on the Mackenzie River "
            "series of annual Canadian lynx trappings for the years 1821-1934. JRSS A 140(4):411-431",
        ),
        DataFile(
            "UScrime.csv",
            "b4ab0338a2f9cf40bfd7db1b76562fb4a88747ee352be52d204af6fb2d10fd36",
            "crime rates and 15 covariates of 47 US states in 1960 (R package MASS, data UScrime)",
            size=3281,
            url=f"{RDATASETS}/csv/MASS/UScrime.csv",
            licence=RDATASETS_LICENCE,
            citation="Ehrlich, I. (1973). Participation in illegitimate activities. JPE 81(3):521-565; Raftery, A. E., "
            "Madigan, D. and Hoeting, J. A. (1997). Bayesian model averaging for linear regression models. JASA "
            "92(437):179-191",
        ),
        DataFile(
            "radiata_pine.dat",
            "588fefc6bbf0057366ff6975d8411e5312e4ace3602d3003cf17dfc2ef5a9370",
            "maximum compression strength, density and resin-adjusted density of 42 radiata pine specimens",
            size=753,
            url=f"{HARMONIC}/examples/data/radiata_pine.dat",
            licence=HARMONIC_LICENCE,
            citation="Williams, E. J. (1959). Regression Analysis. Wiley; Carlin, B. P. and Chib, S. (1995), JRSS B "
            "57(3):473-484; Friel, N. and Wyse, J. (2012), Statistica Neerlandica 66(3):288-308",
        ),
    )
}
