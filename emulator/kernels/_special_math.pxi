# Special functions of the pointwise table (textually included by pointwise.pyx).
#
# The algorithms are PyTorch CPU's (aten/src/ATen/native/Math.h), most of them derived from
# the Cephes Math Library (Copyright (c) 2018, Steven Moshier, 3-clause BSD licence; see
# PyTorch's note "[3-Clause BSD License for the Cephes Math Library]"), the incomplete gamma
# functions from SciPy's (after Cephes and Boost), so that NaN, infinity, pole and domain
# behaviour is CPU's; the coefficient tables are Cephes'. Most evaluate in double. Where
# CPU's float evaluation for float32 (and float16/bfloat16) tensors is less accurate than
# float32 tolerances allow, that evaluation is reproduced: digamma and trigamma (polygamma
# n = 0, 1) and the n! factor of polygamma in float, erfcx's exp(x^2) for x < 0 with x^2
# rounded to float, and the orthogonal-polynomial recurrences in the compute dtype's precision
# with the fused multiply-add that CPU's build contracts a*b - c*d into.
#
# Deliberate differences: erfcx for x >= 0 is exp(x*x)*erfc(x) with an exact x*x split and an
# asymptotic series for x > 26, not Johnson's 100-piece Chebyshev table; the incomplete gamma
# functions use the series and continued fraction everywhere (no Temme uniform expansion for
# large a ~ x: the series converge there too, in more iterations); a polynomial recurrence
# that meets a NaN returns NaN (CPU returns an uninitialized value there).

from libc.math cimport cosf, sinf, acosf, logf, expf, lgammaf, fmaf, sin as _sin, cos as _cos, fma, frexp as _frexp

cdef extern from *:
    """
    static const double ek_airy_an[8] = {
        0.346538101525629, 12.007595273964581, 76.27960536152345, 168.08922493463058, 159.75639135016442,
        70.53609068404442, 14.026469116338967, 1.0};
    static const double ek_airy_ad[8] = {
        0.5675945326387702, 14.75625625848472, 84.51389701414746, 177.31808814540045, 164.2346928715297,
        71.47784008255756, 14.095913560783403, 1.0};
    static const double ek_airy_afn[9] = {
        -0.1316963234183318, -0.6264565444319123, -0.6931580360369335, -0.2797799815451191,
        -0.04919001326095003, -0.004062659235948854, -0.0001592764962392621, -2.776491081552329e-06,
        -1.6778769848911465e-08};
    static const double ek_airy_afd[9] = {
        13.356042070655324, 32.682503279522464, 26.736704094149957, 9.187074029072596, 1.4752914677166642,
        0.11568717379518804, 0.004402916416152112, 7.547203482874142e-05, 4.5185009297058035e-07};
    static const double ek_airy_agn[11] = {
        0.01973399320916857, 0.39110302961568827, 1.0657989759959559, 0.9391692298166502,
        0.35146565610554764, 0.06338889196289255, 0.005858041130483885, 0.000282851600836737,
        6.98793669997261e-06, 8.117892395543892e-08, 3.415517847659236e-10};
    static const double ek_airy_agd[10] = {
        9.30892908077442, 19.835292871831214, 15.564662893286462, 5.476860694229755, 0.9542936116189619,
        0.08645808263523921, 0.004126565238242226, 0.00010125908511650914, 1.1716673321441352e-06,
        4.9183457006293e-09};
    static const double ek_ndtri_p0[5] = {
        -59.96335010141079, 98.00107541859997, -56.67628574690703, 13.931260938727968, -1.2391658386738125};
    static const double ek_ndtri_q0[9] = {
        1.0, 1.9544885833814176, 4.676279128988815, 86.36024213908905, -225.46268785411937,
        200.26021238006066, -82.03722561683334, 15.90562251262117, -1.1833162112133};
    static const double ek_ndtri_p1[9] = {
        4.0554489230596245, 31.525109459989388, 57.16281922464213, 44.08050738932008, 14.684956192885803,
        2.1866330685079025, -0.1402560791713545, -0.03504246268278482, -0.0008574567851546854};
    static const double ek_ndtri_q1[9] = {
        1.0, 15.779988325646675, 45.39076351288792, 41.3172038254672, 15.04253856929075, 2.504649462083094,
        -0.14218292285478779, -0.03808064076915783, -0.0009332594808954574};
    static const double ek_ndtri_p2[9] = {
        3.2377489177694603, 6.915228890689842, 3.9388102529247444, 1.3330346081580755, 0.20148538954917908,
        0.012371663481782003, 0.00030158155350823543, 2.6580697468673755e-06, 6.239745391849833e-09};
    static const double ek_ndtri_q2[9] = {
        1.0, 6.02427039364742, 3.6798356385616087, 1.3770209948908132, 0.21623699359449663,
        0.013420400608854318, 0.00032801446468212774, 2.8924786474538068e-06, 6.790194080099813e-09};
    static const double ek_i0e_a[30] = {
        -4.4153416464793395e-18, 3.3307945188222384e-17, -2.431279846547955e-16, 1.715391285555133e-15,
        -1.1685332877993451e-14, 7.676185498604936e-14, -4.856446783111929e-13, 2.95505266312964e-12,
        -1.726826291441556e-11, 9.675809035373237e-11, -5.189795601635263e-10, 2.6598237246823866e-09,
        -1.300025009986248e-08, 6.046995022541919e-08, -2.670793853940612e-07, 1.1173875391201037e-06,
        -4.4167383584587505e-06, 1.6448448070728896e-05, -5.754195010082104e-05, 0.00018850288509584165,
        -0.0005763755745385824, 0.0016394756169413357, -0.004324309995050576, 0.010546460394594998,
        -0.02373741480589947, 0.04930528423967071, -0.09490109704804764, 0.17162090152220877,
        -0.3046826723431984, 0.6767952744094761};
    static const double ek_i0e_b[25] = {
        -7.233180487874754e-18, -4.830504485944182e-18, 4.46562142029676e-17, 3.461222867697461e-17,
        -2.8276239805165836e-16, -3.425485619677219e-16, 1.7725601330565263e-15, 3.8116806693526224e-15,
        -9.554846698828307e-15, -4.150569347287222e-14, 1.54008621752141e-14, 3.8527783827421426e-13,
        7.180124451383666e-13, -1.7941785315068062e-12, -1.3215811840447713e-11, -3.1499165279632416e-11,
        1.1889147107846439e-11, 4.94060238822497e-10, 3.3962320257083865e-09, 2.266668990498178e-08,
        2.0489185894690638e-07, 2.8913705208347567e-06, 6.889758346916825e-05, 0.0033691164782556943,
        0.8044904110141088};
    static const double ek_i1e_a[29] = {
        2.7779141127610464e-18, -2.111421214358166e-17, 1.5536319577362005e-16, -1.1055969477353862e-15,
        7.600684294735408e-15, -5.042185504727912e-14, 3.223793365945575e-13, -1.9839743977649436e-12,
        1.1736186298890901e-11, -6.663489723502027e-11, 3.625590281552117e-10, -1.8872497517228294e-09,
        9.381537386495773e-09, -4.445059128796328e-08, 2.0032947535521353e-07, -8.568720264695455e-07,
        3.4702513081376785e-06, -1.3273163656039436e-05, 4.781565107550054e-05, -0.00016176081582589674,
        0.0005122859561685758, -0.0015135724506312532, 0.004156422944312888, -0.010564084894626197,
        0.024726449030626516, -0.05294598120809499, 0.1026436586898471, -0.17641651835783406,
        0.25258718644363365};
    static const double ek_i1e_b[25] = {
        7.517296310842105e-18, 4.414348323071708e-18, -4.6503053684893586e-17, -3.209525921993424e-17,
        2.96262899764595e-16, 3.3082023109209285e-16, -1.8803547755107825e-15, -3.8144030724370075e-15,
        1.0420276984128802e-14, 4.272440016711951e-14, -2.1015418427726643e-14, -4.0835511110921974e-13,
        -7.198551776245908e-13, 2.0356285441470896e-12, 1.4125807436613782e-11, 3.2526035830154884e-11,
        -1.8974958123505413e-11, -5.589743462196584e-10, -3.835380385964237e-09, -2.6314688468895196e-08,
        -2.512236237870209e-07, -3.882564808877691e-06, -0.00011058893876262371, -0.009761097491361469,
        0.7785762350182801};
    static const double ek_k0_a[10] = {
        1.374465435613523e-16, 4.25981614279661e-14, 1.0349695257633842e-11, 1.904516377220209e-09,
        2.5347910790261494e-07, 2.286212103119452e-05, 0.001264615411446926, 0.0359799365153615,
        0.3442898999246285, -0.5353273932339028};
    static const double ek_k0_b[25] = {
        5.300433772686263e-18, -1.6475804301524212e-17, 5.2103915050390274e-17, -1.678231096805412e-16,
        5.512055978524319e-16, -1.848593377343779e-15, 6.3400764774050706e-15, -2.2275133269916698e-14,
        8.032890775363575e-14, -2.9800969231727303e-13, 1.140340588208475e-12, -4.514597883373944e-12,
        1.8559491149547177e-11, -7.957489244477107e-11, 3.577397281400301e-10, -1.69753450938906e-09,
        8.574034017414225e-09, -4.660489897687948e-08, 2.766813639445015e-07, -1.8317555227191195e-06,
        1.39498137188765e-05, -0.00012849549581627802, 0.0015698838857300533, -0.0314481013119645,
        2.4403030820659555};
    static const double ek_k1_a[11] = {
        -7.023863479386288e-18, -2.427449850519366e-15, -6.666901694199329e-13, -1.4114883926335278e-10,
        -2.213387630734726e-08, -2.4334061415659684e-06, -0.0001730288957513052, -0.006975723859639864,
        -0.12261118082265715, -0.3531559607765449, 1.5253002273389478};
    static const double ek_k1_b[25] = {
        -5.756744483665017e-18, 1.7940508731475592e-17, -5.689462558442859e-17, 1.838093544366639e-16,
        -6.057047248373319e-16, 2.038703165624334e-15, -7.019837090418314e-15, 2.4771544244813043e-14,
        -8.976705182324994e-14, 3.3484196660784293e-13, -1.2891739609510289e-12, 5.13963967348173e-12,
        -2.1299678384275683e-11, 9.218315187605006e-11, -4.1903547593418965e-10, 2.015049755197033e-09,
        -1.0345762465678097e-08, 5.7410841254500495e-08, -3.5019606030878126e-07, 2.406484947837217e-06,
        -1.936197974166083e-05, 0.00019521551847135162, -0.002857816859622779, 0.10392373657681724,
        2.7206261904844427};
    static const double ek_lanczos_num[13] = {0.006061842346248907, 0.5098416655656676, 19.519927882476175, 449.9445569063168, 6955.999602515376,
        75999.29304014542, 601859.6171681099, 3481712.154980646, 14605578.087685067, 43338889.32467614,
        86363131.2881386, 103794043.11634454, 56906521.913471565};
    static const double ek_lanczos_den[13] = {1.0, 66.0, 1925.0, 32670.0, 357423.0, 2637558.0, 13339535.0, 45995730.0, 105258076.0, 150917976.0, 120543840.0, 39916800.0, 0.0};
    static const double ek_j0_pp[7] = {
        0.0007969367292973471, 0.08283523921074408, 1.239533716464143, 5.447250030587687,
        8.74716500199817, 5.303240382353949, 1.0};
    static const double ek_j0_pq[7] = {
        0.0009244088105588637, 0.08562884743544745, 1.2535274390105895, 5.470977403304171,
        8.761908832370695, 5.306052882353947, 1.0};
    static const double ek_j0_qp[8] = {
        -0.011366383889846916, -1.2825271867050931, -19.553954425773597, -93.20601521237683,
        -177.68116798048806, -147.07750515495118, -51.41053267665993, -6.050143506007285};
    static const double ek_j0_qq[7] = {
        64.3178256118178, 856.4300259769806, 3882.4018360540163, 7240.467741956525, 5930.727011873169,
        2062.0933166032783, 242.0057402402914};
    static const double ek_j0_rp[4] = {
        -4794432209.782018, 1956174919465.5657, -249248344360967.72, 9708622510473064.0};
    static const double ek_j0_rq[8] = {
        499.563147152651, 173785.4016763747, 48440965.83399621, 11185553704.535683, 2112775201154.892,
        310518229857422.56, 3.1812195594320496e+16, 1.7108629408104315e+18};
    static const double ek_j1_pp[7] = {
        0.0007621256162081731, 0.07313970569409176, 1.1271960812968493, 5.112079511468076,
        8.424045901417724, 5.214515986823615, 1.0};
    static const double ek_j1_pq[7] = {
        0.0005713231280725487, 0.06884559087544954, 1.105142326340617, 5.073863861286015,
        8.399855543276042, 5.209828486823619, 1.0};
    static const double ek_j1_qp[8] = {
        0.05108625947501766, 4.982138729512334, 75.82382841325453, 366.7796093601508, 710.8563049989261,
        597.4896124006136, 211.68875710057213, 25.207020585802372};
    static const double ek_j1_qq[7] = {
        74.23732770356752, 1056.4488603826283, 4986.410583376536, 9562.318924047562, 7997.041604473507,
        2826.1927851763908, 336.0936078106983};
    static const double ek_j1_rp[4] = {
        -899971225.7055594, 452228297998.19403, -72749424522181.83, 3682957328638529.0};
    static const double ek_j1_rq[8] = {
        620.8364781180543, 256987.25675774884, 83514679.14319493, 22151159547.97925, 4749141220799.914,
        784369607876235.9, 8.952223361846274e+16, 5.322786203326801e+18};
    static const double ek_y0_yp[8] = {
        15592.436785523574, -14663929.59039716, 5435264770.518765, -982136065717.9115, 87590639439536.7,
        -3466283033847297.0, 4.4273326857256984e+16, -1.8495080043698668e+16};
    static const double ek_y0_yq[7] = {
        1041.2835366425984, 626107.330137135, 268919633.39381415, 86400248710.3935, 20297961275010.555,
        3171577528429750.5, 2.5059625617265306e+17};
    static const double ek_y1_yp[6] = {
        1263204747.9017804, -647355876379.1603, 114509511541823.73, -8127702555013251.0,
        2.024394757135949e+17, -7.788771962659501e+17};
    static const double ek_y1_yq[8] = {
        594.3015923461282, 235564.09294306856, 73481194.44597217, 18760131610.870617, 3882312774962.3857,
        620557727146953.8, 6.871410873553005e+16, 3.9727060811656064e+18};
    """
    const double ek_j0_pp[7]
    const double ek_j0_pq[7]
    const double ek_j0_qp[8]
    const double ek_j0_qq[7]
    const double ek_j0_rp[4]
    const double ek_j0_rq[8]
    const double ek_j1_pp[7]
    const double ek_j1_pq[7]
    const double ek_j1_qp[8]
    const double ek_j1_qq[7]
    const double ek_j1_rp[4]
    const double ek_j1_rq[8]
    const double ek_y0_yp[8]
    const double ek_y0_yq[7]
    const double ek_y1_yp[6]
    const double ek_y1_yq[8]
    const double ek_lanczos_num[13]
    const double ek_lanczos_den[13]
    const double ek_airy_an[8]
    const double ek_airy_ad[8]
    const double ek_airy_afn[9]
    const double ek_airy_afd[9]
    const double ek_airy_agn[11]
    const double ek_airy_agd[10]
    const double ek_ndtri_p0[5]
    const double ek_ndtri_q0[9]
    const double ek_ndtri_p1[9]
    const double ek_ndtri_q1[9]
    const double ek_ndtri_p2[9]
    const double ek_ndtri_q2[9]
    const double ek_i0e_a[30]
    const double ek_i0e_b[25]
    const double ek_i1e_a[29]
    const double ek_i1e_b[25]
    const double ek_k0_a[10]
    const double ek_k0_b[25]
    const double ek_k1_a[11]
    const double ek_k1_b[25]


cdef double _PI = 3.14159265358979323846
cdef double _MACHEP = 1.11022302462515654042E-16
cdef double _NAN_D = float("nan")
cdef double _INF_D = float("inf")


cdef inline double _polevl(double x, const double* c, int n) noexcept nogil:
    """c[0] x^(n-1) + ... + c[n-1] (Horner; coefficients from the highest power)."""
    cdef double r = 0.0
    cdef int i
    for i in range(n):
        r = r * x + c[i]
    return r


cdef inline double _chbevl(double x, const double* c, int n) noexcept nogil:
    """Clenshaw's sum of a Chebyshev series (Cephes chbevl's coefficient order)."""
    cdef double b0 = c[0], b1 = 0.0, b2 = 0.0
    cdef int i
    for i in range(1, n):
        b2 = b1
        b1 = b0
        b0 = x * b1 - b2 + c[i]
    return 0.5 * (b0 - b2)


ctypedef fused real_t:
    float
    double

cdef enum:
    POLY_T, POLY_U, POLY_V, POLY_W, POLY_ST, POLY_SU, POLY_SV, POLY_SW, POLY_H, POLY_HE, POLY_L, POLY_P


cdef inline real_t _rfma(real_t a, real_t b, real_t c) noexcept nogil:
    """a * b + c with one rounding: CPU's build contracts the recurrences' a*b - c*d so."""
    if real_t is float:
        return fmaf(a, b, c)
    return fma(a, b, c)


cdef inline real_t _rcos(real_t x) noexcept nogil:
    if real_t is float:
        return cosf(x)
    return _cos(x)


cdef inline real_t _rsin(real_t x) noexcept nogil:
    if real_t is float:
        return sinf(x)
    return _sin(x)


cdef inline real_t _racos(real_t x) noexcept nogil:
    if real_t is float:
        return acosf(x)
    return acos(x)


# -- gamma family ------------------------------------------------------------------------
cdef real_t _digamma_t(real_t x) noexcept nogil:
    """psi(x) in real_t's precision (CPU has a float and a double version)."""
    cdef real_t result = 0, z, y, one = 1
    cdef double q
    if x == 0:
        return copysign(INFINITY, -x)       # psi(+-0) = -+inf, as C's gamma functions
    if x < 0:
        if x == trunc(x):
            return NAN                      # the poles at the negative integers
        q = <double>x - trunc(<double>x)    # tan(pi * frac) is more accurate than tan(pi * x)
        return _digamma_t(one - x) - <real_t>(_PI / tan(_PI * q))
    while x < 10:
        result -= one / x
        x += one
    if x == 10:
        return result + <real_t>2.25175258906672110764
    y = 0
    if x < <real_t>1.0e17:                   # the asymptotic series in 1/x^2 (Bernoulli numbers)
        z = one / (x * x)
        y = z * ((((((<real_t>8.33333333333333333333E-2 * z - <real_t>2.10927960927960927961E-2) * z
                      + <real_t>7.57575757575757575758E-3) * z - <real_t>4.16666666666666666667E-3) * z
                    + <real_t>3.96825396825396825397E-3) * z - <real_t>8.33333333333333333333E-3) * z
                  + <real_t>8.33333333333333333333E-2)
    if real_t is float:
        return result + logf(x) - <real_t>0.5 / x - y
    return result + log(x) - 0.5 / x - y


cdef real_t _trigamma_t(real_t x) noexcept nogil:
    cdef real_t sign = 1, result = 0, s, ixx, one = 1, pi = <real_t>_PI
    cdef int i
    if x < <real_t>0.5:                      # reflection: psi1(1 - x) + psi1(x) = pi^2 / sin^2(pi x)
        sign = -one
        s = _rsin(pi * x)
        result -= (pi * pi) / (s * s)
        x = one - x
    for i in range(6):
        result += one / (x * x)
        x += one
    ixx = one / (x * x)
    result += (one + one / (2 * x) + ixx * (one / 6 - ixx * (one / 30 - ixx * (one / 42)))) / x
    return sign * result


cdef double _ZETA_A[12]
_ZETA_A[:] = [12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
              -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
              1.8152105401943546773e17, -7.1661652561756670113e18]


cdef double _zeta(double x, double q) noexcept nogil:
    """Hurwitz zeta(x, q) = sum_k (k + q)^-x: direct sum, then Euler-Maclaurin."""
    cdef double a, b, k, s, t, w
    cdef int i
    if x == 1.0:
        return INFINITY
    if x < 1.0:
        return NAN
    if q <= 0.0:
        if q == floor(q):
            return INFINITY
        if x != floor(x):
            return NAN                      # q^-x is complex
    s = pow(q, -x)
    a = q
    i = 0
    b = 0.0
    while i < 9 or a <= 9.0:
        i += 1
        a += 1.0
        b = pow(a, -x)
        s += b
        if -_MACHEP * s < b < _MACHEP * s:
            return s
    w = a
    s += b * w / (x - 1.0)
    s -= 0.5 * b
    a = 1.0
    k = 0.0
    for i in range(12):
        a *= x + k
        b /= w
        t = a * b / _ZETA_A[i]
        s = s + t
        if fabs(t / s) < _MACHEP:
            return s
        k += 1.0
        a *= x + k
        b /= w
        k += 1.0
    return s


cdef double _polygamma(int64_t n, double x, bint single) noexcept nogil:
    """single: CPU's float evaluation for float32 (the zeta sum itself runs in double there too)."""
    if single:
        if n == 0:
            return _digamma_t(<float>x)
        if n == 1:
            return _trigamma_t(<float>x)
        return ((<float>1 if n % 2 else <float>-1) * expf(lgammaf(<float>n + 1))
                * <float>_zeta(<double><float>(n + 1), x))
    if n == 0:
        return _digamma_t(x)
    if n == 1:
        return _trigamma_t(x)
    return (1.0 if n % 2 else -1.0) * exp(lgamma(<double>n + 1.0)) * _zeta(<double>(n + 1), x)


# -- regularized incomplete gamma (SciPy's gammainc / gammaincc) ---------------------------
cdef double _lanczos_sum_expg_scaled(double x) noexcept nogil:
    cdef double y, num = 0.0, den = 0.0
    cdef int i
    if fabs(x) > 1:                          # a polynomial in 1/x: the coefficients reversed
        y = 1.0 / x
        for i in range(12, -1, -1):
            num = num * y + ek_lanczos_num[i]
            den = den * y + ek_lanczos_den[i]
    else:
        for i in range(13):
            num = num * x + ek_lanczos_num[i]
            den = den * x + ek_lanczos_den[i]
    return num / den


cdef double _igam_fac(double a, double x) noexcept nogil:
    """x^a e^-x / Gamma(a), with Lanczos' approximation where a ~ x (no cancellation)."""
    cdef double ax, fac, res, num
    cdef double lanczos_g = 6.024680040776729583740234375
    if fabs(a - x) > 0.4 * fabs(a):
        ax = a * log(x) - x - lgamma(a)
        if ax < -7.09782712893383996843E2:
            return 0.0
        return exp(ax)
    fac = a + lanczos_g - 0.5
    res = sqrt(fac / 2.718281828459045) / _lanczos_sum_expg_scaled(a)
    if a < 200 and x < 200:
        res *= exp(a - x) * pow(x / fac, a)
    else:
        num = (x - a - lanczos_g + 0.5) / fac
        res *= exp(a * (log1p(num) - num) + x * (0.5 - lanczos_g) / fac)
    return res


cdef inline int _igam_maxiter(double a) noexcept nogil:
    # SciPy stops at 2000 terms, enough where it switches to Temme's expansion for large a ~ x;
    # without that expansion the terms near x ~ a fall off like exp(-k^2 / 2a): allow ~sqrt(a).
    return 2000 + <int>(40.0 * sqrt(a)) if a < 1e12 else 2000 + 40000000


cdef double _igam_series(double a, double x) noexcept nogil:
    cdef double ax = _igam_fac(a, x), r = a, c = 1.0, ans = 1.0
    cdef int i, n = _igam_maxiter(a)
    if ax == 0.0:
        return 0.0
    for i in range(n):
        r += 1.0
        c *= x / r
        ans += c
        if c <= _MACHEP * ans:
            break
    return ans * ax / a


cdef double _igamc_series(double a, double x) noexcept nogil:
    cdef double fac = 1.0, total = 0.0, term, logx
    cdef int k
    for k in range(1, 2000):
        fac *= -x / k
        term = fac / (a + k)
        total += term
        if fabs(term) <= _MACHEP * fabs(total):
            break
    logx = log(x)
    return -expm1(a * logx - lgamma(1.0 + a)) - exp(a * logx - lgamma(a)) * total


cdef double _igamc_fraction(double a, double x) noexcept nogil:
    cdef double ax = _igam_fac(a, x), y, z, c, yc, r, t, ans
    cdef double pk, pkm1, pkm2, qk, qkm1, qkm2
    cdef double big = 4.503599627370496e15, biginv = 2.22044604925031308085e-16
    cdef int i, n = _igam_maxiter(a)
    if ax == 0.0:
        return 0.0
    y = 1.0 - a
    z = x + y + 1.0
    c = 0.0
    pkm2 = 1.0
    qkm2 = x
    pkm1 = x + 1.0
    qkm1 = z * x
    ans = pkm1 / qkm1
    for i in range(n):
        c += 1.0
        y += 1.0
        z += 2.0
        yc = y * c
        pk = pkm1 * z - pkm2 * yc
        qk = qkm1 * z - qkm2 * yc
        if qk != 0:
            r = pk / qk
            t = fabs((ans - r) / r)
            ans = r
        else:
            t = 1.0
        pkm2 = pkm1
        pkm1 = pk
        qkm2 = qkm1
        qkm1 = qk
        if fabs(pk) > big:
            pkm2 *= biginv
            pkm1 *= biginv
            qkm2 *= biginv
            qkm1 *= biginv
        if t <= _MACHEP:
            break
    return ans * ax


cdef double _igammac(double a, double x) noexcept nogil:
    # CPU's order of the boundary checks (a NaN argument passes some of them)
    if x < 0 or a < 0:
        return NAN
    if a == 0:
        return 0.0 if x > 0 else NAN
    if x == 0:
        return 1.0
    if isinf(a):
        return NAN if isinf(x) else 1.0
    if isinf(x):
        return 0.0
    if x > 1.1:
        if x < a:
            return 1.0 - _igam_series(a, x)
        return _igamc_fraction(a, x)
    if x <= 0.5:
        if -0.4 / log(x) < a:
            return 1.0 - _igam_series(a, x)
        return _igamc_series(a, x)
    if x * 1.1 < a:
        return 1.0 - _igam_series(a, x)
    return _igamc_series(a, x)


cdef double _igamma(double a, double x) noexcept nogil:
    # CPU's order of the boundary checks (a NaN argument passes some of them)
    if x < 0 or a < 0:
        return NAN
    if a == 0:
        return 1.0 if x > 0 else NAN
    if x == 0:
        return 0.0
    if isinf(a):
        return NAN if isinf(x) else 0.0
    if isinf(x):
        return 1.0
    if x > 1.0 and x > a:
        return 1.0 - _igammac(a, x)
    return _igam_series(a, x)


# -- error function family -----------------------------------------------------------------
cdef double _erfinv(double y) noexcept nogil:
    """A rational first guess (Pavlis' erfinv), then two Newton steps on erf(x) = y."""
    cdef double ya = fabs(y), x, z, num, den
    cdef double two_over_sqrt_pi = 1.12837916709551257390
    if ya > 1.0:
        return NAN
    if ya == 1.0:
        return copysign(INFINITY, y)
    if ya <= 0.7:
        z = y * y
        num = ((-0.140543331 * z + 0.914624893) * z - 1.645349621) * z + 0.886226899
        den = (((0.012229801 * z - 0.329097515) * z + 1.442710462) * z - 2.118377725) * z + 1.0
        x = y * num / den
    else:
        z = sqrt(-log((1.0 - ya) / 2.0))
        num = ((1.641345311 * z + 3.429567803) * z - 1.624906493) * z - 1.970840454
        den = (1.637067800 * z + 3.543889200) * z + 1.0
        x = copysign(num, y) / den
    x = x - (erf(x) - y) / (two_over_sqrt_pi * exp(-x * x))
    x = x - (erf(x) - y) / (two_over_sqrt_pi * exp(-x * x))
    return x


cdef double _erfcx(double x, bint single) noexcept nogil:
    """exp(x^2) erfc(x) without overflow."""
    cdef double hi, lo, t, s, term
    cdef int k
    if isnan(x):
        return x
    if x > 26.0:
        if x > 5e7:
            return 0.56418958354775628694807945156 / x
        # 1/(x sqrt(pi)) * sum_k (-1)^k (2k-1)!! / (2x^2)^k, converged well before k = 12 here
        t = 1.0 / (2.0 * x * x)
        s = 1.0
        term = 1.0
        for k in range(1, 12):
            term *= -(2 * k - 1) * t
            s += term
        return 0.56418958354775628694807945156 / x * s
    if x < -26.7:
        return INFINITY
    if single and x < 0:
        # CPU's float evaluation: 2 exp(x^2) - erfcx(-x) with x^2 rounded to float, whose error
        # (|x|^2 float ulps relative) dominates: reproduce it rather than be more accurate.
        t = <double>(<float>x * <float>x)
        return <double>(<float>2 * expf(<float>t)) - <double><float>_erfcx(-x, False) if x >= -6.1 \
            else <double>(<float>2 * expf(<float>t))
    hi = x * x
    lo = fma(x, x, -hi)                      # x^2 = hi + lo exactly: exp(x^2) keeps full precision
    return exp(hi) * exp(lo) * erfc(x)


cdef double _log_ndtr(double x) noexcept nogil:
    cdef double t = x * 0.70710678118654752440
    if x < -1.0:
        return log(_erfcx(-t, False) / 2.0) - t * t
    return log1p(-erfc(t) / 2.0)


cdef double _ndtri(double y0) noexcept nogil:
    """The inverse of the standard normal CDF (Cephes ndtri)."""
    cdef double y, y2, x, x0, x1, z
    cdef bint negate = True
    if y0 == 0.0:
        return -INFINITY
    if y0 == 1.0:
        return INFINITY
    if y0 < 0.0 or y0 > 1.0 or isnan(y0):
        return NAN
    y = y0
    if y > 1.0 - 0.13533528323661269189:     # exp(-2)
        y = 1.0 - y
        negate = False
    if y > 0.13533528323661269189:
        y = y - 0.5
        y2 = y * y
        x = y + y * (y2 * _polevl(y2, ek_ndtri_p0, 5) / _polevl(y2, ek_ndtri_q0, 9))
        return x * 2.50662827463100050242
    x = sqrt(-2.0 * log(y))
    x0 = x - log(x) / x
    z = 1.0 / x
    if x < 8.0:
        x1 = z * _polevl(z, ek_ndtri_p1, 9) / _polevl(z, ek_ndtri_q1, 9)
    else:
        x1 = z * _polevl(z, ek_ndtri_p2, 9) / _polevl(z, ek_ndtri_q2, 9)
    x = x0 - x1
    return -x if negate else x


cdef inline double _entr(double x) noexcept nogil:
    if isnan(x):
        return x
    if x > 0:
        return -x * log(x)
    if x == 0:
        return 0.0
    return -INFINITY


# -- Bessel functions ------------------------------------------------------------------------
cdef inline double _i0e(double x) noexcept nogil:
    x = fabs(x)
    if x <= 8.0:
        return _chbevl(x / 2.0 - 2.0, ek_i0e_a, 30)
    return _chbevl(32.0 / x - 2.0, ek_i0e_b, 25) / sqrt(x)


cdef inline double _i0(double x) noexcept nogil:
    return exp(fabs(x)) * _i0e(x)


cdef inline double _i1e(double x) noexcept nogil:
    cdef double a = fabs(x), r
    if a <= 8.0:
        r = _chbevl(a / 2.0 - 2.0, ek_i1e_a, 29) * a
    else:
        r = _chbevl(32.0 / a - 2.0, ek_i1e_b, 25) / sqrt(a)
    return -r if x < 0 else r


cdef inline double _i1(double x) noexcept nogil:
    cdef double a = fabs(x), r
    if a <= 8.0:
        r = exp(a) * a * _chbevl(a / 2.0 - 2.0, ek_i1e_a, 29)
    else:
        r = exp(a) * _chbevl(32.0 / a - 2.0, ek_i1e_b, 25) / sqrt(a)
    return -r if x < 0 else r


cdef double _k0e(double x) noexcept nogil:
    """exp(x) K0(x)."""
    if x == 0.0:
        return INFINITY
    if x < 0.0:
        return NAN
    if x <= 2.0:
        return (_chbevl(x * x - 2.0, ek_k0_a, 10) - log(0.5 * x) * _i0(x)) * exp(x)
    return _chbevl(8.0 / x - 2.0, ek_k0_b, 25) / sqrt(x)


cdef double _k0(double x) noexcept nogil:
    if x == 0.0:
        return INFINITY
    if x < 0.0:
        return NAN
    if x <= 2.0:
        return _chbevl(x * x - 2.0, ek_k0_a, 10) - log(0.5 * x) * _i0(x)
    return exp(-x) * _chbevl(8.0 / x - 2.0, ek_k0_b, 25) / sqrt(x)


cdef double _k1e(double x) noexcept nogil:
    """exp(x) K1(x)."""
    if x == 0.0:
        return INFINITY
    if x < 0.0:
        return NAN
    if x <= 2.0:
        return (log(0.5 * x) * _i1(x) + _chbevl(x * x - 2.0, ek_k1_a, 11) / x) * exp(x)
    return _chbevl(8.0 / x - 2.0, ek_k1_b, 25) / sqrt(x)


cdef double _k1(double x) noexcept nogil:
    if x == 0.0:
        return INFINITY
    if x < 0.0:
        return NAN
    if x <= 2.0:
        return log(0.5 * x) * _i1(x) + _chbevl(x * x - 2.0, ek_k1_a, 11) / x
    return exp(-x) * _chbevl(8.0 / x - 2.0, ek_k1_b, 25) / sqrt(x)


cdef double _bessel_asymptotic(bint order1, bint second_kind, double x) noexcept nogil:
    """x > 5: sqrt(2 / (pi x)) (P cos(x - phase) - (5/x) Q sin(x - phase)) (Y: sin/cos swapped),
    P and Q rational functions of 25 / x^2."""
    cdef double w = 25.0 / (x * x) if not order1 else 5.0 / x * (5.0 / x)
    cdef double pp, qq, phase
    if order1:
        pp = _polevl(w, ek_j1_pp, 7) / _polevl(w, ek_j1_pq, 7)
        qq = _polevl(w, ek_j1_qp, 8) / _polevl(w, ek_j1_qq, 7)
        phase = x - 2.356194490192344928846982537459627163
    else:
        pp = _polevl(w, ek_j0_pp, 7) / _polevl(w, ek_j0_pq, 7)
        qq = _polevl(w, ek_j0_qp, 8) / _polevl(w, ek_j0_qq, 7)
        phase = x - 0.785398163397448309615660845819875721
    if second_kind:
        return (pp * sin(phase) + 5.0 / x * qq * cos(phase)) * 0.797884560802865355879892119868763737 / sqrt(x)
    return (pp * cos(phase) - 5.0 / x * qq * sin(phase)) * 0.797884560802865355879892119868763737 / sqrt(x)


cdef double _bessel_j0(double x) noexcept nogil:
    cdef double xx
    if x < 0:
        x = -x
    if x <= 5.0:
        xx = x * x
        if x < 0.00001:
            return 1.0 - xx / 4.0
        # the zeros of J0 at 2.405 and 5.520 factored out, for relative accuracy near them
        return ((xx - 5.78318596294678452118e+00) * (xx - 3.04712623436620863991e+01)
                * _polevl(xx, ek_j0_rp, 4) / _polevl(xx, ek_j0_rq, 8))
    return _bessel_asymptotic(False, False, x)


cdef double _bessel_j1(double x) noexcept nogil:
    cdef double xx
    if x < 0:
        return -_bessel_j1(-x)
    if x <= 5.0:
        xx = x * x
        return (_polevl(xx, ek_j1_rp, 4) / _polevl(xx, ek_j1_rq, 8) * x * (xx - 1.46819706421238932572e+01)
                * (xx - 4.92184563216946036703e+01))
    return _bessel_asymptotic(True, False, x)


cdef double _bessel_y0(double x) noexcept nogil:
    cdef double xx
    if x <= 5.0:
        if x == 0.0:
            return -INFINITY
        if x < 0.0:
            return NAN
        xx = x * x
        return (_polevl(xx, ek_y0_yp, 8) / _polevl(xx, ek_y0_yq, 7)
                + 0.636619772367581343075535053490057448 * log(x) * _bessel_j0(x))
    return _bessel_asymptotic(False, True, x)


cdef double _bessel_y1(double x) noexcept nogil:
    cdef double xx
    if x <= 5.0:
        if x == 0.0:
            return -INFINITY
        if x <= 0.0:
            return NAN
        xx = x * x
        return (x * (_polevl(xx, ek_y1_yp, 6) / _polevl(xx, ek_y1_yq, 8))
                + 0.636619772367581343075535053490057448 * (_bessel_j1(x) * log(x) - 1.0 / x))
    return _bessel_asymptotic(True, True, x)


cdef double _airy_ai(double x) noexcept nogil:
    cdef double z, zz, t, zeta, f, g, k, m, n, ai = 0.0
    cdef bint have_ai = False
    if isinf(x):
        return NAN
    if x > 103.892:
        return 0.0
    if x < -2.09:                            # oscillating: the modulus/phase asymptotic forms
        t = -2.0 * x * sqrt(-x) / 3.0
        z = 1.0 / t
        zz = z * z
        f = zz * _polevl(zz, ek_airy_afn, 9) / _polevl(zz, ek_airy_afd, 9)
        g = z * _polevl(zz, ek_airy_agn, 11) / _polevl(zz, ek_airy_agd, 10)
        t = t + 0.25 * _PI
        return 5.64189583547756286948e-01 / sqrt(sqrt(-x)) * (sin(t) * (1.0 + f) - cos(t) * g)
    if x >= 2.09:                            # decaying: a rational function of 1/zeta
        zeta = 2.0 * x * sqrt(x) / 3.0
        ai = (5.64189583547756286948e-01 * (_polevl(1.0 / zeta, ek_airy_an, 8) / _polevl(1.0 / zeta, ek_airy_ad, 8))
              / (2.0 * sqrt(sqrt(x)) * exp(zeta)))
        if x > 8.3203353:
            return ai
        have_ai = True
    # the power series Ai(x) = c1 f(x) - c2 g(x)
    f = 1.0
    g = x
    k = 1.0
    m = 1.0
    n = x
    t = 1.0
    z = x * x * x
    while t > 2.220446049250313e-16:
        m *= z
        k += 1.0
        m /= k
        n *= z
        k += 1.0
        n /= k
        m /= k
        f += m
        k += 1.0
        n /= k
        g += n
        t = fabs(m / f)
    if not have_ai:
        return 0.355028053887817239260 * f - 0.258819403792806798405 * g
    return ai


cdef inline double _spherical_j0(double x) noexcept nogil:
    cdef double xx
    if isinf(x):
        return 0.0
    if fabs(x) < 0.5:
        xx = x * x
        return 1.0 + xx * (-1.0 / 6.0 + xx * (1.0 / 120.0 + xx * (-1.0 / 5040.0 + xx * (1.0 / 362880.0
                   + xx * (-1.0 / 39916800.0 + xx * (1.0 / 6227020800.0))))))
    return sin(x) / x


# -- orthogonal polynomials P_n(x) ------------------------------------------------------------
# Evaluated in the compute dtype's precision (float for float32, as CPU's templates are), by
# the three-term recurrence, or the trigonometric closed form for large n inside (-1, 1).
cdef int64_t INT64_MIN_ = <int64_t>(<uint64_t>1 << 63)


cdef inline int64_t _degree(double n) noexcept nogil:
    """static_cast<int64_t>(n) as x86-64 does it: NaN and out-of-range values give INT64_MIN."""
    if not (fabs(n) < 9.2233720368547758e18):
        return INT64_MIN_
    return <int64_t>n



cdef real_t _cheb_family(int kind, real_t x, int64_t n) noexcept nogil:
    """Chebyshev T, U, V, W (kind 0..3) at x; the shifted ones call it with 2x - 1, after their
    own checks at x = 0 and 1."""
    cdef real_t p, q, r, one = 1, th, t2
    if n < 0:
        return 0
    if fabs(x) == one:
        if kind == 0:
            return one if (x > 0 or n % 2 == 0) else -one
        if kind == 1:
            return <real_t>(n + 1) if (x > 0 or n % 2 == 0) else <real_t>(-(n + 1))
        if kind == 2:
            if x > 0:
                return one
            return <real_t>(n + n + 1) if n % 2 == 0 else <real_t>(-(n + n + 1))
        if x > 0:
            return <real_t>(n + n + 1)
        return one if n % 2 == 0 else -one
    if fabs(x) < one and ((kind == 0 and n > 6) or (kind != 0 and n > 8)):
        th = _racos(x)
        if kind == 0:
            return _rcos(<real_t>n * th)
        if kind == 1:
            if _rsin(th) != 0:
                return _rsin(<real_t>(n + 1) * th) / _rsin(th)
            return <real_t>(n + 1) * _rcos(<real_t>(n + 1) * th) / x
        if kind == 2:
            if _rsin(th / 2) != one:
                return _rcos((<real_t>n + <real_t>0.5) * th) / _rcos(th / 2)
            return <real_t>(n + n + 1) if n % 2 == 0 else <real_t>(-(n + n + 1))
        if _rcos(th / 2) != one:
            return _rsin((<real_t>n + <real_t>0.5) * th) / _rsin(th / 2)
        if x > 0:
            return <real_t>(n + n + 1)
        return one if n % 2 == 0 else -one
    return _cheb_recurrence(kind, x, x + x, n)


cdef inline real_t _cheb_recurrence(int kind, real_t x, real_t two_x, int64_t n) noexcept nogil:
    """P_{k+1} = 2x P_k - P_{k-1} from P_0 = 1 and the kind's P_1 (two_x is 2x, as CPU forms it)."""
    cdef real_t p = 1, q, r
    cdef int64_t k
    if kind == 0:
        q = x
    elif kind == 1:
        q = two_x
    elif kind == 2:
        q = two_x - 1
    else:
        q = two_x + 1
    if n == 0:
        return 1
    if n == 1:
        return q
    r = q
    k = 2
    while k <= n and not isnan(q):
        r = _rfma(two_x, q, -p)
        p = q
        q = r
        k += 1
    return r


cdef real_t _shifted_cheb(int kind, real_t x, int64_t n) noexcept nogil:
    cdef real_t y, one = 1, th
    if n < 0:
        return 0
    if x == one:
        if kind == 0 or kind == 2:
            return one
        if kind == 1:
            return <real_t>(n + 1)
        return <real_t>(n + n + 1)
    if x == 0:
        if kind == 0 or kind == 3:
            return one if n % 2 == 0 else -one
        if kind == 1:
            return <real_t>(n + 1) if n % 2 == 0 else <real_t>(-(n + 1))
        return <real_t>(n + n + 1) if n % 2 == 0 else <real_t>(-(n + n + 1))
    y = x + x - one
    if fabs(y) < one and ((kind != 3 and n > 6) or (kind == 3 and n > 4)):
        th = _racos(y)
        if kind == 0:
            return _rcos(<real_t>n * th)
        if kind == 1:
            if _rsin(th) != 0:
                return _rsin(<real_t>(n + 1) * th) / _rsin(th)
            return <real_t>(n + 1) * _rcos(<real_t>(n + 1) * th) / y
        if kind == 2:
            if _rsin(th / 2) != one:
                return _rcos((<real_t>n + <real_t>0.5) * th) / _rcos(th / 2)
            return <real_t>(n + n + 1) if n % 2 == 0 else <real_t>(-(n + n + 1))
        if _rcos(th / 2) != one:
            return _rsin((<real_t>n + <real_t>0.5) * th) / _rsin(th / 2)
        return one if n % 2 == 0 else -one
    return _cheb_recurrence(kind, y, y + y, n)


cdef real_t _hermite(bint physicists, real_t x, int64_t n, int64_t limit) noexcept nogil:
    cdef real_t p = 1, q, r = 0
    cdef int64_t k
    if n < 0:
        return 0
    if n == 0:
        return 1
    q = x + x if physicists else x
    if n == 1:
        return q
    if n > limit:
        return NAN
    if physicists:
        k = 2
        while k < n + n:
            r = _rfma(x + x, q, -(<real_t>k * p))
            p = q
            q = r
            k += 2
    else:
        for k in range(1, n):
            r = _rfma(x, q, -(<real_t>k * p))
            p = q
            q = r
    return r


cdef real_t _laguerre(real_t x, int64_t n) noexcept nogil:
    cdef real_t p = 1, q, r = 0, one = 1
    cdef int64_t k
    if n < 0:
        return 0
    if fabs(x) == 0:
        return one
    if n == 0:
        return one
    q = one - x
    if n == 1:
        return q
    r = q                                    # a NaN q skips the recurrence: the result is NaN
    k = 1
    while k < n and not isnan(q):
        r = _rfma(<real_t>(k + k) + (one - x), q, -(<real_t>k * p)) / <real_t>(k + 1)
        p = q
        q = r
        k += 1
    return r


cdef real_t _legendre(real_t x, int64_t n) noexcept nogil:
    cdef real_t p = 1, q, r = 0, one = 1
    cdef int64_t k
    if n < 0:
        return 0
    if fabs(x) == one:
        return one if (x > 0 or n % 2 == 0) else -one
    if n == 0:
        return one
    if n == 1:
        return x
    q = x
    r = q                                    # a NaN q skips the recurrence: the result is NaN
    k = 1
    while k < n and not isnan(q):
        r = _rfma(<real_t>(k + k + 1) * x, q, -(<real_t>k * p)) / <real_t>(k + 1)
        p = q
        q = r
        k += 1
    return r


cdef double _polynomial(int kind, double x, double n_value, bint single) noexcept nogil:
    """P_n(x) of the family ``kind``; ``single``: evaluate in float (a float32 compute dtype)."""
    cdef int64_t n
    if kind == POLY_H:   # CPU: a non-finite degree counts as -1 (the polynomial is then 0)
        n = _degree(n_value) if not (isinf(n_value) or isnan(n_value)) else -1
    else:
        n = _degree(n_value)
    if single:
        if kind <= POLY_W:
            return _cheb_family(kind, <float>x, n)
        if kind <= POLY_SW:
            return _shifted_cheb(kind - POLY_ST, <float>x, n)
        if kind == POLY_H or kind == POLY_HE:
            return _hermite(kind == POLY_H, <float>x, n, 128)
        if kind == POLY_L:
            return _laguerre(<float>x, n)
        return _legendre(<float>x, n)
    if kind <= POLY_W:
        return _cheb_family(kind, x, n)
    if kind <= POLY_SW:
        return _shifted_cheb(kind - POLY_ST, x, n)
    if kind == POLY_H or kind == POLY_HE:
        return _hermite(kind == POLY_H, x, n, 512)
    if kind == POLY_L:
        return _laguerre(x, n)
    return _legendre(x, n)
