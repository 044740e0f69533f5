#include "flywheel/rpc/pem_file.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

std::string Describe(const SettingFile& file) { return StrCat(file.setting, " ", file.path); }

// OpenSSL's queued errors as one line (and the queue emptied), for the end of a message.
std::string TakeOpenSslErrors() {
  std::string out;
  while (const unsigned long code = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof(buffer));
    out += out.empty() ? buffer : StrCat("; ", buffer);
  }
  return out;
}

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Refuses to ask for a passphrase: without this callback OpenSSL would prompt on the terminal.
int NoPassphrase(char*, int, int, void* asked) {
  *static_cast<bool*>(asked) = true;
  return 0;
}

// Every certificate in `pem`, in order; empty when there is none.
std::vector<X509Ptr> ParseCertificates(const std::string& pem) {
  std::vector<X509Ptr> certificates;
  BioPtr bio = MemoryBio(pem);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certificates.emplace_back(x);
  }
  return certificates;
}

std::string NotAfter(const X509* certificate) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(bio.get(), X509_get0_notAfter(certificate));
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

absl::Status CheckCertificates(const std::string& pem, const SettingFile& file) {
  ERR_clear_error();
  const std::vector<X509Ptr> certificates = ParseCertificates(pem);
  if (certificates.empty()) {
    const std::string why = TakeOpenSslErrors();
    return absl::InvalidArgumentError(
        StrCat(Describe(file),
               ": no PEM certificate in it (expected a '-----BEGIN CERTIFICATE-----' block)",
               why.empty() ? "" : StrCat(": ", why)));
  }
  ERR_clear_error();  // the read that ended the loop leaves "no start line"
  for (size_t i = 0; i < certificates.size(); ++i) {
    if (X509_cmp_current_time(X509_get0_notAfter(certificates[i].get())) < 0) {
      return absl::InvalidArgumentError(StrCat(Describe(file), ": certificate ", i + 1, " of ",
                                               certificates.size(), " expired on ",
                                               NotAfter(certificates[i].get())));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PkeyPtr> ParsePrivateKey(const std::string& pem, const SettingFile& file) {
  ERR_clear_error();
  BioPtr bio = MemoryBio(pem);
  bool asked_passphrase = false;
  PkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, &asked_passphrase));
  const std::string why = TakeOpenSslErrors();
  if (asked_passphrase) {
    return absl::InvalidArgumentError(
        StrCat(Describe(file),
               ": the private key is encrypted; flywheel needs it unencrypted (readable by the "
               "process's user only), e.g. `openssl pkey -in KEY -out KEY.plain`"));
  }
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        StrCat(Describe(file),
               ": no PEM private key in it (expected a '-----BEGIN PRIVATE KEY-----' block)",
               why.empty() ? "" : StrCat(": ", why)));
  }
  return key;
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(const SettingFile& file, PemKind kind) {
  std::ifstream in(file.path, std::ios::binary);
  if (!in) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(StrCat(Describe(file), ": no such file"));
    return absl::PermissionDeniedError(
        StrCat(Describe(file), ": cannot read it (", std::strerror(error), ")"));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    return absl::PermissionDeniedError(StrCat(Describe(file), ": cannot read it"));
  }
  std::string pem = contents.str();
  if (kind == PemKind::kCertificates) {
    if (absl::Status s = CheckCertificates(pem, file); !s.ok()) return s;
  } else {
    absl::StatusOr<PkeyPtr> key = ParsePrivateKey(pem, file);
    if (!key.ok()) return key.status();
  }
  return pem;
}

absl::Status CheckKeyMatchesCertificate(const std::string& cert_pem, const SettingFile& cert,
                                        const std::string& key_pem, const SettingFile& key) {
  const std::vector<X509Ptr> certificates = ParseCertificates(cert_pem);
  ERR_clear_error();
  absl::StatusOr<PkeyPtr> pkey = ParsePrivateKey(key_pem, key);
  if (!pkey.ok()) return pkey.status();
  if (certificates.empty()) return CheckCertificates(cert_pem, cert);
  if (X509_check_private_key(certificates.front().get(), pkey->get()) != 1) {
    TakeOpenSslErrors();
    return absl::InvalidArgumentError(StrCat(Describe(key), " is not the private key of the ",
                                             "certificate in ", Describe(cert)));
  }
  return absl::OkStatus();
}

}  // namespace flywheel
